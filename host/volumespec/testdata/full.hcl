id        = "data[0]"
name      = "database"
type      = "csi"
plugin_id = "hostpath"

capacity_min = "1GiB"
capacity_max = "2 GB"
snapshot_id  = "snap-1"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
capability {
  access_mode     = "multi-node-reader-only"
  attachment_mode = "block-device"
}

mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime", "nodiratime"]
}

topology_request {
  required {
    topology { segments { rack = "r1" } }
    topology { segments { rack = "r2" zone = "z" } }
  }
  preferred {
    topology { segments { rack = "r1" } }
  }
}

secrets    { token = "s3cr3t" }
parameters { tier = "fast" }
context    { path = "/srv" }
