// Package adapters is the catalog of CSI plugins built into berth that run
// as storage adapters: go-plugin subprocesses of the agent (the berth
// binary re-executed as `berth builtin csi-adapter NAME`) serving CSI
// through sdk.ServeStorageAdapter, exactly as a third-party adapter in
// <plugin_dir>/csi/ does.
//
// Today there is one, "hostpath": builtin/csi/hostpath's servers, with
// their state under the adapter's data dir (sdk.StorageEnv.DataDir, under
// the client's data dir) and the node's ID (or name) as CSI node ID. Its
// plugin block config is checked by CheckConfig when the agent builds its
// catalog, so a typo stops the agent with the block's file:line rather than
// making the adapter crash and be restarted forever:
//
//	plugin "hostpath" {
//	  type = "csi"
//	  config {
//	    capacity        = "10GiB"      # default: none, each volume must fit the disk's free space
//	    max_volume_size = "100GiB"     # default: 1TiB
//	    max_volumes     = 16           # default: unlimited
//	    topology        = { zone = "z1" }
//	    state_dir       = "/srv/hostpath"  # default: <data_dir>/csi/adapters/hostpath
//	    mode            = "monolith"   # or controller, node
//	  }
//	}
//
// Plugins is the table the agent hands to the storage adapter catalog
// (csi/adapters.CatalogConfig.Builtins): names, arguments and CheckConfig.
//
// Tests that stand in for berth call MainIfRequested first thing in
// TestMain, so a supervisor can re-execute the test binary as it would
// re-execute berth.
package adapters
