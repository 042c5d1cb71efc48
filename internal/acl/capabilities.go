package acl

import "slices"

// Resource is what a policy rule governs.
type Resource string

// The resources of a policy, one block each.
const (
	Job      Resource = "job"
	Volume   Resource = "volume"
	Plugin   Resource = "plugin"
	Node     Resource = "node"
	Operator Resource = "operator"
	Agent    Resource = "agent"
)

// Resources lists every resource in the order policies print them.
var Resources = []Resource{Job, Volume, Plugin, Node, Operator, Agent}

// Capability is one thing a rule may grant on its resource.
type Capability string

// Dispositions: the values of a rule's policy. Deny is also a capability,
// with the same meaning (Nomad's).
const (
	Deny  = "deny"
	List  = "list"
	Read  = "read"
	Write = "write"
)

// Job capabilities, Nomad's namespace capabilities of the same names.
const (
	ListJobs       Capability = "list-jobs"
	ReadJob        Capability = "read-job"
	ParseJob       Capability = "parse-job"
	SubmitJob      Capability = "submit-job"
	DispatchJob    Capability = "dispatch-job"
	ReadLogs       Capability = "read-logs"
	ReadFS         Capability = "read-fs"
	AllocExec      Capability = "alloc-exec"
	AllocLifecycle Capability = "alloc-lifecycle"
)

// Volume and plugin capabilities, Nomad's storage capabilities.
const (
	CSIListVolume     Capability = "csi-list-volume"
	CSIReadVolume     Capability = "csi-read-volume"
	CSIWriteVolume    Capability = "csi-write-volume"
	CSIMountVolume    Capability = "csi-mount-volume"
	CSIRegisterPlugin Capability = "csi-register-plugin"
)

// Host volume capabilities, Nomad 1.10's dynamic host volume namespace
// capabilities: create and delete manage a volume through the node's
// plugin, read lists and reads them and mounts one read_only, write
// mounts one read-write. A volume rule's write grants all of them (as it
// grants csi-write-volume); read grants host-volume-read.
const (
	HostVolumeCreate Capability = "host-volume-create"
	HostVolumeRead   Capability = "host-volume-read"
	HostVolumeWrite  Capability = "host-volume-write"
	HostVolumeDelete Capability = "host-volume-delete"
)

// Plain capabilities of the resources that have no finer ones (node,
// operator, agent) and of plugin: what their read and write dispositions
// grant, also writable as capabilities.
const (
	CapList  Capability = List
	CapRead  Capability = Read
	CapWrite Capability = Write
)

// resourceSpec is what a resource's rules may say: the capabilities it
// knows and what each disposition expands to.
type resourceSpec struct {
	caps   []Capability
	expand map[string][]Capability
}

// specs follows Nomad's expansion of namespace and plugin policies:
// read is the looking capabilities, write adds the acting ones. Nomad
// grants csi-register-plugin with no disposition (a job hosting a CSI
// plugin is rarer than one using a volume); berth's plugin write does,
// since a plugin rule is where an operator looks for it.
var specs = map[Resource]resourceSpec{
	Job: {
		caps: []Capability{ListJobs, ReadJob, ParseJob, SubmitJob, DispatchJob, ReadLogs, ReadFS, AllocExec, AllocLifecycle},
		expand: map[string][]Capability{
			Read:  {ListJobs, ReadJob, ParseJob},
			Write: {ListJobs, ReadJob, ParseJob, SubmitJob, DispatchJob, ReadLogs, ReadFS, AllocExec, AllocLifecycle},
		},
	},
	Volume: {
		caps: []Capability{CSIListVolume, CSIReadVolume, CSIWriteVolume, CSIMountVolume,
			HostVolumeCreate, HostVolumeRead, HostVolumeWrite, HostVolumeDelete},
		expand: map[string][]Capability{
			Read: {CSIListVolume, CSIReadVolume, HostVolumeRead},
			Write: {CSIListVolume, CSIReadVolume, CSIWriteVolume, CSIMountVolume,
				HostVolumeCreate, HostVolumeRead, HostVolumeWrite, HostVolumeDelete},
		},
	},
	Plugin: {
		caps: []Capability{CapList, CapRead, CSIRegisterPlugin},
		expand: map[string][]Capability{
			List:  {CapList},
			Read:  {CapList, CapRead},
			Write: {CapList, CapRead, CSIRegisterPlugin},
		},
	},
	Node:     plain,
	Operator: plain,
	Agent:    plain,
}

var plain = resourceSpec{
	caps: []Capability{CapRead, CapWrite},
	expand: map[string][]Capability{
		Read:  {CapRead},
		Write: {CapRead, CapWrite},
	},
}

// Dispositions returns the policy values r's rules accept, deny first.
func Dispositions(r Resource) []string {
	out := []string{Deny}
	for _, d := range []string{List, Read, Write} {
		if _, ok := specs[r].expand[d]; ok {
			out = append(out, d)
		}
	}
	return out
}

// Capabilities returns the capabilities r's rules accept (deny aside).
func Capabilities(r Resource) []Capability { return slices.Clone(specs[r].caps) }

// Known reports whether c is a capability of r.
func Known(r Resource, c Capability) bool { return slices.Contains(specs[r].caps, c) }
