# A system job: one alloc on every eligible Linux node, placed again on each
# node that joins later.
job "node-agent" {
  type = "system"

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  group "agent" {
    task "heartbeat" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do date; sleep 60; done"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
