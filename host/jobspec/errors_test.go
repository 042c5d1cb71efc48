package jobspec

import (
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/sdk/driverpb"
)

// Each malformed or semantically wrong file gives every problem at once,
// each with its position and field path. The expected text is the whole
// error, so a change of wording or position shows here.
func TestParseErrors(t *testing.T) {
	drivers := map[string]*driverpb.Schema{"raw_exec": rawExecSchema, "mock": {}}
	for _, tc := range []struct {
		name string
		file string // default web.hcl
		src  string
		want string
		kind error // every entry must wrap it, when set
	}{
		{
			name: "syntax error",
			src:  "job \"web\" {\n  group \"g\" {\n    count = \n  }\n}\n",
			want: "web.hcl:3:13: syntax error: Invalid expression: Expected the start of an expression, but found an invalid expression token.",
			kind: ErrSyntax,
		},
		{
			name: "unknown driver",
			src: `job "web" {
  group "api" {
    task "web" {
      driver = "rawexec"
    }
  }
}
`,
			want: `web.hcl:4:7: group "api" task "web": driver: no driver "rawexec" in the cluster; did you mean "raw_exec"?`,
			kind: ErrUnknownDriver,
		},
		{
			name: "unknown driver, nothing close",
			src:  "job \"web\" {\n  group \"api\" {\n    task \"web\" {\n      driver = \"docker\"\n    }\n  }\n}\n",
			want: `web.hcl:4:7: group "api" task "web": driver: no driver "docker" in the cluster (drivers: mock, raw_exec)`,
			kind: ErrUnknownDriver,
		},
		{
			name: "count -1",
			src: `job "web" {
  group "api" {
    count = -1
    task "web" {
      driver = "raw_exec"
      config { command = "sleep" }
    }
  }
}
`,
			want: `web.hcl:3:5: group "api": count: must be >= 0, got -1`,
			kind: ErrInvalidJob,
		},
		{
			name: "bad constraint operator",
			src: `job "web" {
  constraint {
    attribute = "${attr.kernel.name}"
    operator  = "regex"
    value     = "linux"
  }
  group "api" {
    task "web" {
      driver = "raw_exec"
      config { command = "sleep" }
    }
  }
}
`,
			want: `web.hcl:4:5: constraint[0].operator: unknown operator "regex"; did you mean "regexp"?`,
			kind: ErrInvalidJob,
		},
		{
			name: "missing task",
			src:  "job \"web\" {\n  group \"api\" {\n    count = 2\n  }\n}\n",
			want: `web.hcl:2:3: group "api": no task: a group needs at least one task`,
			kind: ErrInvalidJob,
		},
		{
			name: "missing group",
			src:  "job \"web\" {\n  type = \"batch\"\n}\n",
			want: `web.hcl:1:1: group: a job needs at least one group`,
			kind: ErrInvalidJob,
		},
		{
			name: "no job",
			src:  "# nothing here\n",
			want: `web.hcl:1:1: no job block: a job file holds one job "ID" { ... }`,
			kind: ErrInvalidJob,
		},
		{
			name: "misspelt keys with did you mean",
			src: `job "web" {
  priorty = 10
  group "api" {
    cuont = 2
    task "web" {
      drvier = "raw_exec"
      resorces {
        cpu = 100
      }
      config { command = "sleep" }
    }
  }
}
`,
			want: `web.hcl:2:3: priorty: unknown key; did you mean "priority"?
web.hcl:4:5: group "api": cuont: unknown key; did you mean "count"?
web.hcl:6:7: group "api" task "web": drvier: unknown key; did you mean "driver"?
web.hcl:7:7: group "api" task "web": resorces: unknown key; did you mean "resources"?`,
			kind: ErrUnknownKey,
		},
		{
			name: "wrong types",
			src: `job "web" {
  priority = "high"
  group "api" {
    count = 1.5
    task "web" {
      driver = 7
      leader = "yes"
      kill_timeout = 30
      resources {
        cpu = "100"
      }
      config { command = "sleep" }
      env {
        LIST = ["a"]
      }
    }
  }
}
`,
			want: `web.hcl:2:14: priority: whole number required, got string
web.hcl:4:13: group "api": count: whole number required, got 1.5
web.hcl:6:16: group "api" task "web": driver: string required, got number
web.hcl:7:16: group "api" task "web": leader: bool required, got string
web.hcl:8:22: group "api" task "web": kill_timeout: duration string (like "30s") required, got number
web.hcl:10:15: group "api" task "web": resources.cpu: whole number required, got string
web.hcl:14:16: group "api" task "web": env.LIST: string required, got list`,
			kind: ErrWrongType,
		},
		{
			name: "duplicate names",
			src: `job "web" {
  group "api" {
    task "web" {
      driver = "raw_exec"
      config { command = "sleep" }
    }
    task "web" {
      driver = "raw_exec"
      config { command = "sleep" }
    }
  }
  group "api" {
    task "x" {
      driver = "raw_exec"
      config { command = "sleep" }
    }
  }
}
`,
			want: `web.hcl:7:5: group "api" task "web": duplicate task "web" (first defined at web.hcl:3:5)
web.hcl:12:3: group "api": duplicate group "api" (first defined at web.hcl:2:3)`,
			kind: ErrInvalidJob,
		},
		{
			name: "block as argument and argument as block",
			src: `job "web" {
  group "api" {
    restart = { attempts = 1 }
    count { n = 1 }
    task "web" {
      driver = "raw_exec"
      config { command = "sleep" }
    }
  }
}
`,
			want: `web.hcl:3:5: group "api": restart: block required, got argument (write restart { ... } without =)
web.hcl:4:5: group "api": count: argument required, got block (write count = ...)`,
			kind: ErrWrongType,
		},
		{
			name: "driver config against the schema",
			src: `job "web" {
  group "api" {
    task "web" {
      driver = "raw_exec"
      config {
        args = "not a list"
        comand = "sleep"
      }
    }
  }
}
`,
			want: `web.hcl:5:7: group "api" task "web": config.command: required key is missing
web.hcl:6:9: group "api" task "web": config.args: expected a list(string), got a string
web.hcl:7:9: group "api" task "web": config.comand: driver "raw_exec" has no config key "comand"; did you mean "command"? (valid keys: args, command, cwd)`,
		},
		{
			name: "semantic problems everywhere, all at once",
			src: `job "bad job" {
  type     = "servce"
  priority = 500
  group "api" {
    restart {
      attempts = 10
      interval = "1m"
      delay    = "15s"
      mode     = "retry"
    }
    reschedule {
      delay     = "1h"
      max_delay = "1m"
    }
    constraint {
      attribute = "${attr.os.version}"
      operator  = "version"
      value     = ">= one"
    }
    constraint {
      attribute = "${node.unique.name}"
      operator  = "regexp"
      value     = "web-(["
    }
    constraint {
      operator = "="
      value    = "x"
    }
    task "web" {
      driver      = "raw_exec"
      leader      = true
      kill_signal = "SIGNOPE"
      config { command = "sleep" }
      resources {
        cpu    = 0
        memory = -5
      }
      lifecycle {
        hook    = "poststop"
        sidecar = true
      }
      constraint {
        distinct_hosts = true
      }
      volume_mount {
        volume      = "dat"
        destination = "/data"
      }
    }
    task "sidecar" {
      driver = "raw_exec"
      leader = true
      config { command = "sleep" }
      lifecycle {
        hook = "prestrat"
      }
    }
  }
}
`,
			want: `web.hcl:1:5: id: job ID "bad job" may hold only letters, digits, '_', '-' and '.'
web.hcl:2:14: type: unknown job type "servce"; did you mean "service"?
web.hcl:3:3: priority: must be between 1 and 100, got 500
web.hcl:5:5: group "api": restart: 10 attempts 15s apart do not fit in an interval of 1m0s; lengthen interval or shorten delay
web.hcl:9:18: group "api": restart.mode: unknown restart mode "retry" (one of "fail", "delay")
web.hcl:13:7: group "api": reschedule.max_delay: 1m0s is shorter than delay 1h0m0s
web.hcl:18:7: group "api": constraint[0].value: version constraint ">= one": malformed version "one"
web.hcl:23:7: group "api": constraint[1].value: invalid regexp: error parsing regexp: missing closing ]: ` + "`[`" + `
web.hcl:25:5: group "api": constraint[2].attribute: required for operator "="
web.hcl:32:7: group "api" task "web": kill_signal: unknown signal "SIGNOPE" (a name such as "SIGINT", or a number)
web.hcl:35:9: group "api" task "web": resources.cpu: must be positive (MHz), got 0
web.hcl:36:9: group "api" task "web": resources.memory: must be positive (MB), got -5
web.hcl:40:9: group "api" task "web": lifecycle.sidecar: a poststop task runs after the others have stopped; it cannot be a sidecar
web.hcl:43:9: group "api" task "web": constraint[0].operator: distinct_hosts places a job's or group's allocs on different nodes; a task cannot ask for it
web.hcl:46:9: group "api" task "web": volume_mount[0].volume: the group declares no volume "dat" (declare it with a volume block in the group)
web.hcl:52:7: group "api" task "sidecar": leader: a group has at most one leader task; "web" is one already
web.hcl:55:16: group "api" task "sidecar": lifecycle.hook: unknown lifecycle hook "prestrat"; did you mean "prestart"?`,
		},
		{
			name: "volumes and csi plugins",
			src: `job "web" {
  type = "batch"
  group "api" {
    volume "data" {
      type      = "nfs"
      per_alloc = true
      access_mode = "single-node-writter"
    }
    volume "logs" {
      attachment_mode = "block"
    }
    task "plugin" {
      driver = "raw_exec"
      config { command = "sleep" }
      csi_plugin {
        type = "node"
      }
    }
    task "other" {
      driver = "raw_exec"
      config { command = "sleep" }
      csi_plugin {
        id   = "x"
        type = "nodes"
      }
      volume_mount {
        volume = "data"
      }
    }
  }
}
`,
			want: `web.hcl:5:7: group "api" volume "data": type: must be "csi" or "host", got "nfs"
web.hcl:6:7: group "api" volume "data": per_alloc: per_alloc appends the alloc index to source, which is empty
web.hcl:7:7: group "api" volume "data": access_mode: unknown access mode "single-node-writter"; did you mean "single-node-writer"?
web.hcl:9:5: group "api" volume "logs": source: required: the ID of the volume to claim
web.hcl:10:7: group "api" volume "logs": attachment_mode: unknown attachment mode "block" (one of "file-system", "block-device")
web.hcl:15:7: group "api" task "plugin": csi_plugin.id: required: the plugin's ID, which volumes name
web.hcl:16:9: group "api" task "plugin": csi_plugin.type: a node plugin must keep running while volumes are mounted; it cannot be in a batch job
web.hcl:24:9: group "api" task "other": csi_plugin.type: must be "controller", "node" or "monolith", got "nodes"
web.hcl:26:7: group "api" task "other": volume_mount[0].destination: required: where the volume appears in the task`,
			kind: ErrInvalidJob,
		},
		{
			name: "host volumes and propagation",
			src: `job "web" {
  group "api" {
    volume "data" {
      type        = "host"
      per_alloc   = true
      access_mode = "single-node-writter"
    }
    volume "ro" {
      type      = "host"
      source    = "logs"
      read_only = true
    }
    task "web" {
      driver = "raw_exec"
      config { command = "sleep" }
      volume_mount {
        volume           = "ro"
        destination      = "/ro"
        propagation_mode = "bidirectional"
      }
      volume_mount {
        volume           = "data"
        destination      = "/data"
        propagation_mode = "host-to-tsak"
      }
    }
  }
}
`,
			want: `web.hcl:3:5: group "api" volume "data": source: required: the name of a host volume of the node (a host_volume block of the client's config)
web.hcl:5:7: group "api" volume "data": per_alloc: applies to CSI volumes only; a host volume is one directory of a node
web.hcl:6:7: group "api" volume "data": access_mode: unknown access mode "single-node-writter"; did you mean "single-node-writer"?
web.hcl:19:9: group "api" task "web": volume_mount[0].propagation_mode: bidirectional propagation lets the task's mounts reach the host; a read-only mount cannot have it (use host-to-task)
web.hcl:24:9: group "api" task "web": volume_mount[1].propagation_mode: unknown propagation mode "host-to-tsak"; did you mean "host-to-task"?`,
			kind: ErrInvalidJob,
		},
		{
			// BERTH_VOLUME_DATA_1 would name both: one would hide the other.
			name: "volumes sharing an environment name",
			src: `job "web" {
  group "api" {
    volume "data-1" {
      type   = "host"
      source = "a"
    }
    volume "data.1" {
      type   = "host"
      source = "b"
    }
    task "web" {
      driver = "raw_exec"
      config { command = "sleep" }
      volume_mount {
        volume      = "data-1"
        destination = "/a"
      }
      volume_mount {
        volume      = "data.1"
        destination = "/b"
      }
    }
  }
}
`,
			want: `web.hcl:19:9: group "api" task "web": volume_mount[1].volume: volumes "data-1" and "data.1" are both named BERTH_VOLUME_DATA_1 in the task's environment: rename one`,
			kind: ErrInvalidJob,
		},
		{
			// Two blocks claiming one volume for an alloc: the state machine
			// holds one claim per (alloc, volume), so the plan would be refused.
			name: "one volume named twice",
			src: `job "web" {
  group "api" {
    volume "data" {
      type   = "csi"
      source = "db"
    }
    volume "logs" {
      type   = "csi"
      source = "db"
    }
    volume "shard" {
      type      = "csi"
      source    = "s"
      per_alloc = true
    }
    volume "shard0" {
      type   = "csi"
      source = "s[0]"
    }
    volume "shard1" {
      type   = "csi"
      source = "s[1]"
      read_only = true
    }
    volume "shardx" {
      type   = "csi"
      source = "s[x]"
    }
    task "web" {
      driver = "raw_exec"
      config { command = "sleep" }
    }
  }
}
`,
			want: `web.hcl:9:7: group "api" volume "logs": source: "db" is the volume group volume "data" (web.hcl:3:5) claims already; ` +
				`an alloc holds one claim per volume: declare it once and mount it twice with volume_mount
web.hcl:18:7: group "api" volume "shard0": source: "s[0]" is the volume the alloc of index 0 of per_alloc group volume "shard" (web.hcl:11:5) ` +
				`claims already; an alloc holds one claim per volume: declare it once and mount it twice with volume_mount
web.hcl:22:7: group "api" volume "shard1": source: "s[1]" is the volume the alloc of index 1 of per_alloc group volume "shard" (web.hcl:11:5) ` +
				`claims already; an alloc holds one claim per volume: declare it once and mount it twice with volume_mount`,
			kind: ErrInvalidJob,
		},
		{
			name: "csi plugin directories",
			src: `job "web" {
  group "api" {
    task "relative" {
      driver = "raw_exec"
      config { command = "sleep" }
      csi_plugin {
        id                     = "p1"
        type                   = "node"
        mount_dir              = "csi"
        stage_publish_base_dir = "/local/csi/../x/"
        health_timeout         = "0s"
      }
    }
    task "overlap" {
      driver = "raw_exec"
      config { command = "sleep" }
      csi_plugin {
        id                     = "p2"
        type                   = "controller"
        mount_dir              = "/csi"
        stage_publish_base_dir = "/csi/staging"
      }
    }
    task "root" {
      driver = "raw_exec"
      config { command = "sleep" }
      csi_plugin {
        id        = "p3"
        type      = "monolith"
        mount_dir = "/"
      }
    }
  }
}
`,
			want: `web.hcl:9:9: group "api" task "relative": csi_plugin.mount_dir: must be an absolute path in the task, got "csi"
web.hcl:10:9: group "api" task "relative": csi_plugin.stage_publish_base_dir: must not contain a ".." element: "/local/csi/../x/"
web.hcl:11:9: group "api" task "relative": csi_plugin.health_timeout: must be positive, got 0s
web.hcl:21:9: group "api" task "overlap": csi_plugin.stage_publish_base_dir: "/csi/staging" and mount_dir "/csi" overlap: the task gets each as a mount of its own
web.hcl:30:9: group "api" task "root": csi_plugin.mount_dir: must not be "/": a mount there would hide the task's whole filesystem`,
			kind: ErrInvalidJob,
		},
		{
			name: "volume_mount destinations",
			src: `job "web" {
  group "api" {
    volume "data" {
      type      = "csi"
      source    = "v1"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "app" {
      driver = "raw_exec"
      config { command = "sleep" }
      volume_mount {
        volume      = "data"
        destination = "../../../../etc"
      }
      volume_mount {
        volume      = "data"
        destination = "/srv/../../etc"
      }
      volume_mount {
        volume      = "data"
        destination = "/"
      }
      volume_mount {
        volume      = "data"
        destination = "/srv/data"
      }
      volume_mount {
        volume      = "data"
        destination = "/srv/data"
      }
      volume_mount {
        volume      = "data"
        destination = "/csi"
      }
      csi_plugin {
        id   = "p1"
        type = "monolith"
      }
    }
  }
}
`,
			want: `web.hcl:14:9: group "api" task "app": volume_mount[0].destination: must be an absolute path in the task, got "../../../../etc"
web.hcl:18:9: group "api" task "app": volume_mount[1].destination: must not contain a ".." element: "/srv/../../etc"
web.hcl:22:9: group "api" task "app": volume_mount[2].destination: must not be "/": a mount there would hide the task's whole filesystem
web.hcl:30:9: group "api" task "app": volume_mount[4].destination: "/srv/data" is also the task path of volume_mount[3]: each mount needs its own
web.hcl:34:9: group "api" task "app": volume_mount[5].destination: "/csi" is also the task path of csi_plugin.mount_dir: each mount needs its own`,
			kind: ErrInvalidJob,
		},
		{
			name: "csi plugin sides",
			src: `job "web" {
  group "api" {
    task "ctrl" {
      driver = "raw_exec"
      config { command = "sleep" }
      csi_plugin {
        id   = "p"
        type = "controller"
      }
    }
    task "node" {
      driver = "raw_exec"
      config { command = "sleep" }
      csi_plugin {
        id   = "p"
        type = "node"
      }
    }
    task "both" {
      driver = "raw_exec"
      config { command = "sleep" }
      csi_plugin {
        id   = "p"
        type = "monolith"
      }
    }
  }
}
`,
			want: `web.hcl:24:9: group "api" task "both": csi_plugin.type: task "ctrl" already serves plugin "p" as controller in this group; one task per plugin side`,
			kind: ErrInvalidJob,
		},
		{
			name: "system jobs",
			src: `job "sys" {
  type = "system"
  group "g" {
    count = 3
    reschedule {
      attempts = 1
    }
    task "t" {
      driver = "raw_exec"
      config { command = "sleep" }
    }
  }
}
`,
			want: `web.hcl:4:5: group "g": count: a system job runs one alloc of each group on every node; leave count out (got 3)
web.hcl:5:5: group "g": reschedule: system jobs are not rescheduled: their allocs belong to their nodes`,
			kind: ErrInvalidJob,
		},
		{
			name: "bad durations and names",
			src: `job "web" {
  group "a/b" {
    restart {
      delay = "soon"
      interval = "-1s"
    }
    task "" {
      driver = "raw_exec"
      config { command = "sleep" }
      kill_timeout = "1500us"
    }
  }
}
`,
			want: `web.hcl:2:3: group "a/b": group name "a/b" may hold only letters, digits, '_', '-' and '.'
web.hcl:4:15: group "a/b": restart.delay: invalid duration "soon" (want a number and a unit, like "500ms", "30s", "5m" or "1h")
web.hcl:5:18: group "a/b": restart.interval: must not be negative, got -1s
web.hcl:7:5: group "a/b" task "": task name must not be empty
web.hcl:10:22: group "a/b" task "": kill_timeout: durations are kept in whole milliseconds, got 1500us`,
		},
		{
			name: "two jobs",
			src:  "job \"a\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"x\" }\n    }\n  }\n}\njob \"b\" {}\n",
			want: `web.hcl:9:1: a job file holds one job; job "b" is another (the first is at web.hcl:1:1)`,
			kind: ErrInvalidJob,
		},
		{
			// Found by FuzzParse: spelling these out took seconds each.
			name: "numbers with huge exponents",
			src: `job "web" {
  priority = 1e9999999
  meta {
    a = 1e-9999999
  }
}
`,
			want: `web.hcl:1:1: group: a job needs at least one group
web.hcl:2:14: priority: 1e+9999999 or so is too large
web.hcl:4:9: meta.a: number 1e-9999999 or so is out of range`,
			kind: ErrInvalidJob,
		},
		{
			name: "invalid UTF-8",
			src:  "job \"web\" {\n  meta {\n    a = \"\xff\"\n  }\n}\n",
			want: `web.hcl:3:10: syntax error: the file is not valid UTF-8`,
			kind: ErrSyntax,
		},
		{
			name: "json: root array",
			file: "web.json",
			src:  "\n  [{\"job\": {}}]",
			want: `web.json:2:3: the root of a JSON job file must be an object, not an array`,
			kind: ErrWrongType,
		},
		{
			name: "json: misspelt key and wrong type",
			file: "web.json",
			src: `{"job": {"web": {
  "group": {"api": {
    "count": "2",
    "task": {"web": {"driver": "raw_exec", "confg": {"command": "x"}}}
  }}
}}}`,
			want: `web.json:3:14: group "api": count: whole number required, got string
web.json:4:44: group "api" task "web": confg: unknown key; did you mean "config"?`,
		},
		{
			name: "json: syntax error",
			file: "web.json",
			src:  "{\"job\": {\"web\": {\"group\": }}}",
			want: `web.json:1:27: syntax error: Missing JSON value: A JSON value must start with a brace, a bracket, a number, a string, or a keyword.`,
			kind: ErrSyntax,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = "web.hcl"
			}
			job, err := Parse(file, []byte(tc.src), WithDrivers(drivers))
			if err == nil {
				t.Fatalf("Parse accepted the file: %v", job)
			}
			if job != nil {
				t.Errorf("Parse returned a job with its error")
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got: %s\nwant: %s", err, tc.want)
			}
			var es *Errors
			if !errors.As(err, &es) {
				t.Fatalf("error is %T, want *Errors", err)
			}
			for _, e := range es.Errs {
				if !e.Pos.IsValid() {
					t.Errorf("error without a position: %v", e)
				}
				if tc.kind != nil && !errors.Is(e, tc.kind) {
					t.Errorf("%v: kind %v, want %v", e, e.Kind, tc.kind)
				}
			}
		})
	}
}

// An error's parts are there for programs: the API and the CLI show the
// position, field and message apart.
func TestErrorParts(t *testing.T) {
	_, err := Parse("web.hcl", []byte("job \"web\" {\n  group \"api\" {\n    count = -1\n    task \"t\" { driver = \"x\" }\n  }\n}\n"))
	var es *Errors
	if !errors.As(err, &es) || len(es.Errs) != 1 {
		t.Fatalf("got %v, want one error", err)
	}
	e := es.Errs[0]
	if e.Pos != (Pos{File: "web.hcl", Line: 3, Column: 5}) || e.Path != `group "api": count` || e.Msg != "must be >= 0, got -1" {
		t.Errorf("parts: pos %v path %q msg %q", e.Pos, e.Path, e.Msg)
	}
	if !errors.Is(err, ErrInvalidJob) || errors.Is(err, ErrSyntax) {
		t.Errorf("errors.Is through *Errors: %v", err)
	}
	if strings.Contains(es.Error(), "\n") {
		t.Errorf("one error should be one line: %q", es.Error())
	}
}
