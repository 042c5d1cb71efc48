// Package jobspec reads job files — HCL, or HCL's JSON syntax for files
// ending in .json — into *pb.Job, and validates jobs, whether they come from
// a file or, as JSON, through the API.
//
// A job file holds one job, shaped like Nomad's:
//
//	job "web" {
//	  type = "service"            # or "batch", "system"
//	  group "app" {
//	    count = 2
//	    task "server" {
//	      driver = "raw_exec"
//	      config { command = "sleep"  args = ["3600"] }
//	      resources { cpu = 100  memory = 64 }
//	    }
//	  }
//	}
//
// examples/jobs/web.hcl and examples/jobs/node-agent.hcl (at the module
// root) are complete examples, parsed by the tests.
// Durations are strings ("30s") stored as *_ms fields; interpolations such as
// "${attr.kernel.name}" stay in the strings as written, for the scheduler
// (constraints) and the client (env, config) to resolve. HCL 1's compact
// style (`resources { cpu = 100  memory = 64 }` on one line) is accepted, as
// in the agent config.
//
// # Entry points
//
// Parse and ParseFile decode a file, fill in Nomad's defaults (priority 50,
// count 1, restart and reschedule policies by job type, 100 MHz and 300 MB,
// kill_timeout 5s, SIGTERM, 10 log files of 10 MB, update max_parallel 1;
// csi_plugin mount_dir "/csi", stage_publish_base_dir "/local/csi",
// health_timeout 30s)
// and validate the result. WithDrivers adds the driver checks: each task's
// driver must be one of the given task config schemas, and its config block
// must satisfy that schema (the sdk's ConfigSpec rules). Without it the
// drivers are not checked, since which exist depends on the cluster.
//
// The server gets jobs as JSON, never parsed here: it calls Canonicalize
// (the same defaults, where proto3 can tell a field is unset), ValidateJob
// and ValidateDrivers with the schemas its nodes report.
//
// # Errors
//
// Every problem is reported at once, as *Errors: a list of *Error, each
// with the position in the file ("web.hcl:12:5"), the field path
// (`group "api" task "web": resources.cpu`) and what is wrong; a misspelt
// key or word gets "did you mean". Each *Error wraps a sentinel (ErrSyntax,
// ErrUnknownKey, ErrWrongType, ErrInvalidJob, ErrUnknownDriver), all
// InvalidArgument, so the HTTP API answers 400. Jobs from the API have no
// positions; their errors name the field path only.
//
// The "version" constraint operator's values are parsed by
// internal/versions, the matcher the scheduler uses too.
package jobspec
