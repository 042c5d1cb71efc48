// Package acceptance runs berth end to end: real `berth` processes on
// 127.0.0.1, started from config files, killed with SIGKILL and restarted on
// their data dirs, driven through the HTTP API and the CLI.
//
// The tests build the berth binary once (TestMain) unless BERTH_BIN names
// one. `make test` runs one round of each scenario; `make acceptance` sets
// BERTH_ACCEPTANCE_LONG=1 for repeated failovers. Only processes the tests
// started are ever signalled, by PID.
//
// # A volume's whole life with another CSI plugin
//
// TestCSILifecycle takes a volume through create, a write on one client,
// stop, a read on the other client, snapshot create/list/delete, expand
// and delete, with a CSI plugin run as tasks (a monolith on the first
// client, a node instance on the second sharing its state directory) and
// logs how long each step took. It runs the built-in hostpath plugin under
// raw_exec and under exec. Pointed at another plugin binary it runs the
// same lifecycle with that plugin too, as two more subtests (under
// raw_exec and, as root, exec); unset, those subtests do not exist:
//
//	BERTH_ACCEPTANCE_CSI_PLUGIN    the plugin's executable (absolute path)
//	BERTH_ACCEPTANCE_CSI_PLUGIN_ARGS
//	    its arguments as the monolith, split on spaces, with {endpoint}
//	    (the CSI endpoint berth gives the task), {node} (the client's
//	    name, unique in the cluster), {state} (a directory the test owns)
//	    and {mode} ("monolith") replaced; default:
//	    "--endpoint={endpoint} --nodeid={node} --statedir={state}", the
//	    kubernetes-csi hostpath plugin's flags
//	BERTH_ACCEPTANCE_CSI_PLUGIN_NODE_ARGS
//	    the arguments of a node-only instance on the second client ({mode}
//	    is "node") that reaches the monolith's volumes through the same
//	    {state}. Unset: the plugin's storage is local to its node, as the
//	    kubernetes-csi hostpath plugin's is (its volumes' topology pins
//	    them there), so it runs on the first client only and the reader
//	    runs there too; the test logs that the data did not cross nodes.
//
// Under exec the plugin's directory is the task's /opt/csi-plugin (a
// read-only bind), {state} is under /shared, and the plugin gets
// CAP_SYS_ADMIN to mount; a dynamically linked plugin needs its libraries
// under the usual /lib, /lib64 or /usr. For the kubernetes-csi hostpath
// plugin (github.com/kubernetes-csi/csi-driver-host-path, built as its own
// main module where its source is reachable: `make hostpath` in its
// checkout gives bin/hostpathplugin):
//
//	BERTH_ACCEPTANCE_CSI_PLUGIN=$PWD/bin/hostpathplugin \
//	  go test ./acceptance -run TestCSILifecycle -v
//
// # Containers
//
// TestCSIPluginInAContainer runs the built-in hostpath plugin, packed by the
// test into an OCI image archive with the berth binary under test, as a
// privileged csi_plugin task of the containerd driver (examples/containerd,
// built into the agent's plugin_dir), with containerised consumers, and
// kills the plugin's container mid-stage. It uses the containerd at
//
//	BERTH_CONTAINERD_ADDRESS    a containerd socket; make test sets it to
//	    the private daemon it runs the tests under (internal/withcontainerd);
//	    unset, the test starts a private daemon of its own
//	    (internal/containerdtest), which needs root, containerd and runc
//
// and keeps to a containerd namespace of its own (berth-acceptance), so
// pointing it at the machine's containerd
// (BERTH_CONTAINERD_ADDRESS=/run/containerd/containerd.sock) leaves the
// rest of that containerd alone.
package acceptance
