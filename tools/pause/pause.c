/*
 * The pod sandbox's pause process for the local test cluster: no image can be
 * pulled here, so we build our own. It holds the pod's namespaces open, sleeps
 * until SIGTERM or SIGINT, and reaps any child re-parented to it (it is PID 1
 * of the pod when the PID namespace is shared).
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested;

static void request_stop(int sig) { (void)sig; stop_requested = 1; }

static void reap_children(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {.sa_handler = request_stop};
  struct sigaction reap = {.sa_handler = reap_children, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  if (sigaction(SIGTERM, &stop, NULL) < 0 || sigaction(SIGINT, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &reap, NULL) < 0) {
    return 1;
  }
  while (!stop_requested) {
    pause();
  }
  return 0;
}
