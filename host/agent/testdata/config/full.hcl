name      = "s1"
data_dir  = "/var/lib/berth"
bind_addr = "127.0.0.1"
ports { http = 7646  rpc = 7647  raft = 7648 }   # the defaults
server {
  enabled = true
  bootstrap_expect = 3
  retry_join = ["127.0.0.1:7647"]
  retry_interval = "5s"        # default 5s
  heartbeat_ttl = "10s"        # default 10s: a node missing heartbeats this long is down
  heartbeat_grace = "10s"      # default 10s: extra time every node gets after a leader change
  leave_on_terminate = false   # on SIGTERM/SIGINT remove this server from the raft configuration
  raft_snapshot_threshold = 8192   # raft log entries between snapshots
  raft_snapshot_interval = "120s"
  raft_trailing_logs = 10240
  force_detach_after = "10m"   # default 6m: a down node's volume claims are released after this
  volume_reconcile_interval = "1m"   # default 5m: compare controllers' published volumes with the attachments
  gc_percent = 400             # default 200: the Go collector's target when the agent runs a server (process-wide)
}
client {
  enabled = true
  servers = ["127.0.0.1:7647"]
  node_name = ""               # default: name, else hostname
}
plugin_dir = "/opt/berth/plugins"   # default <data_dir>/plugins
plugin "raw_exec" {
  config {
    enabled = true
    anything = ["the driver's schema validates this later"]
  }
}
log_level = "info"   log_json = false
