# A service job: two copies of a long-running command, run by raw_exec.
# Enable raw_exec on the client (berth run -dev does) and run it with
#   berth job run web.hcl
job "web" {
  type     = "service"
  priority = 50

  group "app" {
    count = 2

    restart {
      attempts = 3
      interval = "5m"
      delay    = "10s"
      mode     = "delay"
    }

    task "server" {
      driver = "raw_exec"

      config {
        command = "sleep"
        args    = ["3600"]
      }

      env {
        GREETING = "hello from ${node.unique.name}"
      }

      resources {
        cpu    = 100
        memory = 64
      }

      kill_timeout = "10s"
    }
  }
}
