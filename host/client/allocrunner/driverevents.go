package allocrunner

import "berth.dev/berth/host/client/taskrunner"

// TaskOfAttempt returns the runner of the task whose newest attempt has
// the driver task ID taskID, nil when none has: the client routes a
// driver's task events with it.
func (ar *AllocRunner) TaskOfAttempt(taskID string) *taskrunner.TaskRunner {
	ar.mu.Lock()
	trs := make([]*taskrunner.TaskRunner, 0, len(ar.order))
	for _, name := range ar.order {
		trs = append(trs, ar.tasks[name].tr)
	}
	ar.mu.Unlock()
	for _, tr := range trs {
		if tr.HasAttempt(taskID) {
			return tr
		}
	}
	return nil
}
