# The built-in hostpath CSI plugin as a task on every node: a monolith
# (controller and node in one process) that berth supervises and reports
# in `berth plugin status hostpath-task`.
job "csi-hostpath" {
  type = "system"

  group "plugin" {
    task "plugin" {
      driver = "raw_exec"

      config {
        command = "${attr.berth.binary}"
        args = [
          "builtin", "csi-hostpath",
          "--endpoint", "${CSI_ENDPOINT}",
          "--node-id", "${node.unique.name}",
          # The plugin's staging/publish base on this node outlives its allocs.
          "--state-dir", "${csi.stage_publish_base_dir}/state",
        ]
      }

      csi_plugin {
        id   = "hostpath-task"
        type = "monolith"
      }

      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}
