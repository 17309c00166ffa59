//! What a command did: the data observe.rs's commands return and the
//! checks read.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// Not on PATH.
    Missing,
    /// Still running after this many seconds; killed.
    TimedOut(u64),
    /// Could not be started or waited for.
    Error(String),
    Exited {
        code: Option<i32>,
        stdout: String,
        stderr: String,
    },
}

impl Ran {
    /// Its stdout if it exited 0, else what went wrong.
    pub fn stdout(&self) -> Result<&str, String> {
        match self {
            Ran::Exited {
                code: Some(0),
                stdout,
                ..
            } => Ok(stdout),
            Ran::Exited { code, stderr, .. } => {
                let code = code.map_or("a signal".to_owned(), |code| code.to_string());
                Err(format!("exited with {code}: {}", stderr.trim()))
            }
            Ran::Missing => Err("not found".to_owned()),
            Ran::TimedOut(seconds) => Err(format!("no answer within {seconds} s")),
            Ran::Error(error) => Err(error.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exit_0_gives_stdout() {
        let exited = |code, stdout: &str, stderr: &str| Ran::Exited {
            code,
            stdout: stdout.into(),
            stderr: stderr.into(),
        };
        assert_eq!(exited(Some(0), "go1.26.8\n", "").stdout(), Ok("go1.26.8\n"));
        assert_eq!(
            exited(Some(2), "", "RTNETLINK answers: Operation not permitted\n").stdout(),
            Err("exited with 2: RTNETLINK answers: Operation not permitted".into())
        );
        assert_eq!(
            exited(None, "", "").stdout(),
            Err("exited with a signal: ".into())
        );
        assert_eq!(
            Ran::TimedOut(10).stdout(),
            Err("no answer within 10 s".into())
        );
        assert_eq!(Ran::Missing.stdout(), Err("not found".into()));
    }
}
