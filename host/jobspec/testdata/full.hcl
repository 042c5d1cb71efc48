job "full" {
  name     = "Full example"
  type     = "service"
  priority = 70

  meta {
    team = "storage"
  }

  constraint {
    attribute = "${attr.kernel.name}"
    operator  = "=="
    value     = "linux"
  }

  constraint {
    distinct_hosts = true
  }

  update {
    max_parallel     = 2
    min_healthy_time = "15s"
  }

  group "db" {
    count = 3

    restart {
      attempts = 5
      interval = "10m"
      delay    = "20s"
      mode     = "delay"
    }

    reschedule {
      attempts  = 4
      interval  = "2h"
      delay     = "1m"
      max_delay = "30m"
      unlimited = false
    }

    constraint {
      attribute = "${driver.raw_exec.version}"
      operator  = "version"
      value     = ">= 1.2, < 2"
    }

    constraint {
      attribute = "${node.unique.name}"
      operator  = "regexp"
      value     = "^db-[0-9]+$"
    }

    constraint {
      attribute = "${meta.ssd}"
      operator  = "is_set"
    }

    update {
      min_healthy_time = "30s"
    }

    meta {
      shard = 7
    }

    volume "data" {
      type            = "csi"
      source          = "db-data"
      read_only       = false
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
      per_alloc       = true

      mount_options {
        fs_type     = "ext4"
        mount_flags = ["noatime", "nodiratime"]
      }
    }

    volume "scratch" {
      type      = "host"
      source    = "fast-disk"
      read_only = false
      sticky    = true
    }

    task "init" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }

      lifecycle {
        hook    = "prestart"
        sidecar = false
      }
    }

    task "server" {
      driver       = "raw_exec"
      leader       = true
      user         = "nobody"
      kill_timeout = "30s"
      kill_signal  = "SIGINT"

      config {
        command = "/usr/bin/db"
        args    = ["--port", 5432, "--verbose", true]
        workers = 4
        debug   = false
        labels  = { tier = "db", replicas = 3 }
        port_map {
          db = 5432
        }
      }

      env {
        DATA_DIR = "${volume.data}"
        PORT     = 5432
      }

      meta {
        role = "primary"
      }

      resources {
        cpu    = 500
        memory = 1024
      }

      constraint {
        attribute = "${attr.cpu.arch}"
        operator  = "!="
        value     = "arm"
      }

      volume_mount {
        volume      = "data"
        destination = "/srv/data"
        read_only   = true
      }

      volume_mount {
        volume           = "scratch"
        destination      = "/srv/scratch"
        propagation_mode = "host-to-task"
      }

      logs {
        max_files     = 3
        max_file_size = 20
      }
    }
  }

  group "plugins" {
    task "csi" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/csi-plugin"
      }

      csi_plugin {
        id                     = "hostpath"
        type                   = "monolith"
        mount_dir              = "/csi"
        stage_publish_base_dir = "/local/csi"
        health_timeout         = "45s"
      }
    }
  }
}
