// Package ctrdriver is berth's containerd task driver: tasks run as
// containers of a containerd daemon, through containerd's v2 Go client.
// It imports nothing of berth but the sdk; the module's main serves it with
// sdk.ServeDriver, and an agent finds the binary in its plugin_dir as
// "containerd".
//
// Plugin config (plugin "containerd" { config { ... } }):
//
//	address      string  containerd's socket (default /run/containerd/containerd.sock)
//	namespace    string  containerd namespace of berth's images and containers (default "berth")
//	snapshotter  string  snapshotter of the containers' root filesystems (default "overlayfs")
//	runtime      string  containerd runtime (default "io.containerd.runc.v2")
//	allow_privileged   bool          tasks may set privileged (default false)
//	allow_host_mounts  bool          tasks may bind host paths with mounts (default false)
//	allow_devices      bool          tasks may add host devices (default false)
//	allow_caps         list(string)  what cap_add may add, or all (default: Docker's default set)
//
// Host access is opt-in, as with Nomad's docker driver: a task config
// needing more than the plugin config allows is a ConfigError naming the
// task key and the plugin config key that would allow it. berth's own
// mounts (task directories, volume_mount, csi_plugin) are always made.
//
// The fingerprint is healthy while the socket answers (with containerd's
// version, namespace, snapshotter and runtime as attributes), and
// unhealthy with the reason otherwise: an absent socket, a daemon that
// does not answer, a snapshotter it lacks. The driver probes every 15s
// while healthy and every 3s while not; StartTask on an unhealthy driver
// is sdk.ErrDriverUnhealthy with the reason.
//
// Task config:
//
//	image            string        required; an image reference, normalized as Docker does (alpine → docker.io/library/alpine:latest)
//	load             string        absolute path of an OCI or docker image archive imported first (no registry needed);
//	                               an archive holding one image under another name is tagged image,
//	                               unless image already names another image in the namespace
//	entrypoint       list(string)  replaces the image's ENTRYPOINT and drops its CMD
//	command          string        replaces the image's CMD
//	args             list(string)  arguments after command; without command, they replace CMD
//	env              map(string)   added last, over the image's and the task's environment
//	working_dir      string        absolute path in the container (default: the image's)
//	user             string        user[:group], names from the image's /etc/passwd or numbers (default: the task's user, else the image's)
//	privileged       bool          all capabilities, all host devices, no seccomp, no masked paths (allow_privileged)
//	host_network     bool          the host's network namespace, hosts and resolv.conf (else: loopback only)
//	cap_add          list(string)  capabilities added to containerd's default set (NET_ADMIN, or all; from allow_caps)
//	cap_drop         list(string)  capabilities removed (names, or all)
//	devices          list(string)  host_path[:container_path[:permissions]], permissions from r, w, m (default rwm; allow_devices)
//	readonly_rootfs  bool          a read-only root filesystem
//	mounts           list(string)  host_path:container_path[:options], options ro, rw, private (default), rslave, rshared (allow_host_mounts)
//
// A missing image is pulled from its registry (registry credentials are
// not supported yet), with task events: the pull's start, each layer, its
// end or its failure. A failed pull or load is an sdk.StartError naming
// the image or archive.
//
// A container that is not privileged runs under Docker's default seccomp
// filter (containerd's contrib/seccomp), as Docker and Nomad's docker
// driver run theirs.
//
// The container gets the task's environment (berth's PATH only when the
// image sets none: berth's default PATH is the host's), its resources as
// cgroup limits (memory limit, CPU shares), berth's task directories
// mounted as Nomad's docker driver mounts them (/alloc, /local, /secrets,
// with BERTH_ALLOC_DIR, BERTH_TASK_DIR and BERTH_SECRETS_DIR pointing
// there), the task's mounts from the driver protocol (volume_mount,
// csi_plugin) and the config's mounts. A host-to-task mount is rslave, a
// bidirectional one rshared; the host side of either is made a shared
// mount point first (sdk/executor.EnsureShared, undone at destroy), and
// the container's root propagation is rshared when any mount is (rslave
// when one is host-to-task), so mounts a CSI plugin makes inside reach the
// host.
//
// Lifecycle: stdout and stderr go through FIFOs (in the task dir) to the
// task's rotating log files. The exit status is containerd's; a status
// of 129 to 159 is read as death by signal (status-128), as a shell would
// (containerd reports no more), so a task that itself exits 143 reads as
// killed by SIGTERM. An exit by SIGKILL after the kernel's OOM killer
// acted in the container's cgroup is oom_killed, with an "OOM killed"
// event, as exec reports it. StopTask sends the signal to the container's
// process, then SIGKILL to all of its processes after the timeout
// (kill_timeout). TaskStats reads CPU, memory and processes from the
// container's cgroup (v1 or v2) through containerd.
//
// Recovery: the handle carries the containerd namespace and container ID.
// containerd keeps the container and its exit status while the plugin or
// the client is gone; RecoverTask loads the container, reattaches its
// FIFOs to the log files when it still runs and waits for its exit, so a
// task that ended meanwhile reports its real exit code. While no plugin
// reads the FIFOs the container's output waits in the pipes' buffers
// (64 KiB each, then the task's writes block) only as long as the task
// runs: output of a task that ends while no plugin runs is lost with its
// pipes. After an exit the driver waits at most 2s for the output to
// drain (a child holding stdout open does not hold up the exit).
// DestroyTask deletes the task, the container and its snapshot, and
// releases the shared mount points berth made for it (recorded in the
// container's labels). DestroyTask of a task ID the plugin does not hold
// looks the container up in containerd and deletes it all the same: a
// container a plugin created but never returned a handle for (a plugin
// killed inside StartTask, which berth's driver manager follows with a
// DestroyTask on the next plugin), or one a RecoverTask could not take
// back. RecoverTask of a container whose task is gone (a node reboot
// loses containerd's tasks, not its containers) deletes the container and
// reports ErrTaskNotFound. A start whose caller gave up removes its
// container.
//
// Start cost: one client connection serves every call. A start of an
// image already unpacked is a GetImage and a snapshot Stat, then
// containerd's own work as `ctr run` does it (snapshot prepare, container
// create, shim and runc create, start); the image's manifest and config,
// read three times per start (unpacked check, spec, snapshot parent), come
// from a cache of small content blobs checked against their digest
// (blobcache.go), not from containerd's content service. `make bench`'s
// containerd section compares job run → running with `ctr run -d`.
package ctrdriver
