package authz

import (
	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc/pb"
)

// JobVersionFunc reads a stored version of a job; nil when there is none.
type JobVersionFunc func(jobID string, version uint64) *pb.Job

// Extra returns what a decoded request needs beyond its method's need:
//   - a job registered, or reverted to a version, with a group that mounts
//     a CSI volume needs csi-mount-volume, and one with a task that is a
//     CSI plugin csi-register-plugin (Nomad's rules); one that mounts a
//     host volume needs host-volume-read when every such mount is
//     read_only, host-volume-write otherwise; a revert's version is
//     read with versions (nil: not checked);
//   - a forced volume deregister, and a forced host volume delete (its
//     node not asked: its data may remain), need operator write.
func Extra(fullMethod string, req any, versions JobVersionFunc) []Need {
	switch fullMethod {
	case pb.Jobs_Register_FullMethodName:
		r, _ := req.(*pb.JobRegisterRequest)
		return jobNeeds(r.GetJob())
	case pb.Jobs_Revert_FullMethodName:
		if r, _ := req.(*pb.JobRevertRequest); r != nil && versions != nil {
			return jobNeeds(versions(r.GetJobId(), r.GetVersion()))
		}
	case pb.Volumes_Deregister_FullMethodName:
		if r, _ := req.(*pb.VolumeDeregisterRequest); r.GetForce() {
			return []Need{need(acl.Operator, acl.CapWrite)}
		}
	case pb.HostVolumes_Delete_FullMethodName:
		if r, _ := req.(*pb.HostVolumeDeleteRequest); r.GetForce() {
			return []Need{need(acl.Operator, acl.CapWrite)}
		}
	}
	return nil
}

func jobNeeds(j *pb.Job) []Need {
	var out []Need
	mounts, plugins, hostRead, hostWrite := false, false, false, false
	for _, g := range j.GetGroups() {
		for _, v := range g.GetVolumes() {
			switch v.GetType() {
			case "", "csi":
				mounts = true
			case "host":
				if v.GetReadOnly() {
					hostRead = true
				} else {
					hostWrite = true
				}
			}
		}
		for _, t := range g.GetTasks() {
			if t.GetCsiPlugin() != nil {
				plugins = true
			}
		}
	}
	if mounts {
		out = append(out, need(acl.Volume, acl.CSIMountVolume))
	}
	if plugins {
		out = append(out, need(acl.Plugin, acl.CSIRegisterPlugin))
	}
	if hostWrite {
		out = append(out, need(acl.Volume, acl.HostVolumeWrite))
	} else if hostRead {
		out = append(out, need(acl.Volume, acl.HostVolumeRead))
	}
	return out
}
