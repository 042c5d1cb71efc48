// Package allocdir lays out an alloc's directories on the client:
//
//	<data_dir>/alloc/<alloc>/              the alloc dir (Destroy removes it)
//	<data_dir>/alloc/<alloc>/alloc/        shared by the alloc's tasks (BERTH_ALLOC_DIR)
//	<data_dir>/alloc/<alloc>/alloc/data/   data the tasks share
//	<data_dir>/alloc/<alloc>/alloc/tmp/
//	<data_dir>/alloc/<alloc>/alloc/logs/   every task's stdout and stderr files,
//	                                       "<task>.stdout.<n>", "<task>.stderr.<n>"
//	<data_dir>/alloc/<alloc>/<task>/       the task's working dir (the driver's task_dir)
//	<data_dir>/alloc/<alloc>/<task>/local/   BERTH_TASK_DIR
//	<data_dir>/alloc/<alloc>/<task>/secrets/ BERTH_SECRETS_DIR, mode 0700
//	<data_dir>/alloc/<alloc>/<task>/tmp/
//
// Building is idempotent (a recovered alloc builds again over what is
// there) and never loosens what exists. A task may not be named "alloc" or
// anything that is not a single path element: it would land on the shared
// dir or outside the alloc dir.
package allocdir
