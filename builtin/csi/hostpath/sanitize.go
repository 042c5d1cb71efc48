package hostpath

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// sanitize renders a request for the log with every field the CSI spec marks
// csi_secret replaced by "***", so secrets never reach a log file.
func sanitize(req any) string {
	m, ok := req.(proto.Message)
	if !ok {
		return fmt.Sprintf("%T", req)
	}
	c := proto.Clone(m)
	redact(c.ProtoReflect())
	b, err := protojson.Marshal(c)
	if err != nil {
		return fmt.Sprintf("%T (unprintable: %v)", req, err)
	}
	return string(b)
}

func isSecret(fd protoreflect.FieldDescriptor) bool {
	v, ok := proto.GetExtension(fd.Options(), csi.E_CsiSecret).(bool)
	return ok && v
}

func redact(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case isSecret(fd):
			switch {
			case fd.IsMap():
				mp := m.Mutable(fd).Map()
				mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
					if fd.MapValue().Kind() == protoreflect.StringKind {
						mp.Set(k, protoreflect.ValueOfString("***"))
					} else {
						mp.Clear(k)
					}
					return true
				})
			case fd.Kind() == protoreflect.StringKind && !fd.IsList():
				m.Set(fd, protoreflect.ValueOfString("***"))
			default:
				m.Clear(fd)
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				redact(mv.Message())
				return true
			})
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				redact(l.Get(i).Message())
			}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			redact(v.Message())
		}
		return true
	})
}
