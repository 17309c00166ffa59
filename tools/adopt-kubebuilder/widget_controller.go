package controller

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	demov1alpha1 "example.com/widget-operator/api/v1alpha1"
)

// Release is the operator's release, and Image its own image: set when it
// is built (go build -ldflags "-X .../internal/controller.Release=0.2.0").
var (
	Release = "0.0.0"
	Image   = "controller:latest"
)

// Migrated is the Widget's condition for its data's migration to Release.
const Migrated = "Migrated"

// WidgetReconciler reconciles a Widget object: it migrates each Widget's
// data to this release with a Job (the manager's own image, `/manager
// migrate`), then says so in status.version and the Migrated condition.
type WidgetReconciler struct {
	client.Client
	Scheme *runtime.Scheme
}

// +kubebuilder:rbac:groups=demo.example.com,resources=widgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=demo.example.com,resources=widgets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=demo.example.com,resources=widgets/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create

// Reconcile migrates the Widget to Release once: a Job per Widget and
// release, created suspended while spec.holdMigration says so (and
// resumed by whoever unsuspends it); when it succeeded, status.version is
// Release and Migrated is True.
func (r *WidgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)

	var widget demov1alpha1.Widget
	if err := r.Get(ctx, req.NamespacedName, &widget); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if widget.Status.Version == Release {
		return ctrl.Result{}, nil
	}

	name := fmt.Sprintf("%s-migrate-%s", widget.Name, strings.ReplaceAll(Release, ".", "-"))
	var job batchv1.Job
	err := r.Get(ctx, types.NamespacedName{Namespace: widget.Namespace, Name: name}, &job)
	if apierrors.IsNotFound(err) {
		job = migrationJob(&widget, name)
		if err := controllerutil.SetControllerReference(&widget, &job, r.Scheme); err != nil {
			return ctrl.Result{}, err
		}
		log.Info("migrating", "job", name, "release", Release, "suspended", widget.Spec.HoldMigration)
		if err := r.Create(ctx, &job); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.setMigrated(ctx, &widget, metav1.ConditionFalse, "Migrating",
			fmt.Sprintf("Job %s migrates the data to %s", name, Release))
	}
	if err != nil {
		return ctrl.Result{}, err
	}

	if job.Status.Succeeded == 0 {
		// The Job's status changes reconcile the Widget again (Owns).
		return ctrl.Result{}, r.setMigrated(ctx, &widget, metav1.ConditionFalse, "Migrating",
			fmt.Sprintf("Job %s migrates the data to %s", name, Release))
	}
	log.Info("migrated", "job", name, "release", Release)
	widget.Status.Version = Release
	return ctrl.Result{}, r.setMigrated(ctx, &widget, metav1.ConditionTrue, "MigrationSucceeded",
		fmt.Sprintf("Job %s migrated the data to %s", name, Release))
}

// setMigrated writes the Migrated condition (and status.version) when
// either changed.
func (r *WidgetReconciler) setMigrated(ctx context.Context, widget *demov1alpha1.Widget,
	status metav1.ConditionStatus, reason, message string) error {
	before := widget.DeepCopy()
	meta.SetStatusCondition(&widget.Status.Conditions, metav1.Condition{
		Type:               Migrated,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: widget.Generation,
	})
	if before.Status.Version == widget.Status.Version &&
		meta.IsStatusConditionPresentAndEqual(before.Status.Conditions, Migrated, status) &&
		meta.FindStatusCondition(before.Status.Conditions, Migrated).Message == message {
		return nil
	}
	return r.Status().Update(ctx, widget)
}

// migrationJob runs `/manager migrate` from the operator's own image.
func migrationJob(widget *demov1alpha1.Widget, name string) batchv1.Job {
	suspend, backoffLimit, yes, no := widget.Spec.HoldMigration, int32(0), true, false
	return batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: widget.Namespace,
			Labels: map[string]string{
				"demo.example.com/widget":  widget.Name,
				"demo.example.com/release": Release,
			},
		},
		Spec: batchv1.JobSpec{
			Suspend:      &suspend,
			BackoffLimit: &backoffLimit,
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name:  "migrate",
						Image: Image,
						Args:  []string{"migrate", widget.Namespace + "/" + widget.Name},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: &no,
							ReadOnlyRootFilesystem:   &yes,
							RunAsNonRoot:             &yes,
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

// SetupWithManager sets up the controller with the Manager.
func (r *WidgetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&demov1alpha1.Widget{}).
		Owns(&batchv1.Job{}).
		Named("widget").
		Complete(r)
}
