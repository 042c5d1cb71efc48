package csi

import (
	"cmp"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Redacted replaces every secret value in what Redact returns, and every
// echo of a secret in a plugin's error message.
const Redacted = "[REDACTED]"

// Redact returns a copy of m in which every field the CSI spec marks as a
// secret (the csi_secret field option, found at any depth) has its values
// replaced by Redacted; the keys of a secrets map stay, so a log still shows
// which secrets were sent. m itself is not changed. Use it on anything about
// to be logged, shown in an API response or recorded in an event.
func Redact(m proto.Message) proto.Message {
	if m == nil || !m.ProtoReflect().IsValid() {
		return m
	}
	c := proto.Clone(m)
	walkSecrets(c.ProtoReflect(), func(msg protoreflect.Message, fd protoreflect.FieldDescriptor) {
		switch {
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
			mp := msg.Mutable(fd).Map()
			var keys []protoreflect.MapKey
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			for _, k := range keys {
				mp.Set(k, protoreflect.ValueOfString(Redacted))
			}
		case !fd.IsList() && !fd.IsMap() && fd.Kind() == protoreflect.StringKind:
			msg.Set(fd, protoreflect.ValueOfString(Redacted))
		default:
			// A secret of a shape the spec does not use today: drop it whole
			// rather than guess which part of it is safe to show.
			msg.Clear(fd)
		}
	})
	return c
}

// RedactedString is the text form of Redact(m), for log lines.
func RedactedString(m proto.Message) string {
	if m == nil {
		return ""
	}
	return prototext.MarshalOptions{}.Format(Redact(m))
}

// secretValues lists the secret string values in m, longest first.
func secretValues(m proto.Message) []string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil
	}
	var vals []string
	walkSecrets(m.ProtoReflect(), func(msg protoreflect.Message, fd protoreflect.FieldDescriptor) {
		v := msg.Get(fd)
		switch {
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
			v.Map().Range(func(_ protoreflect.MapKey, s protoreflect.Value) bool {
				vals = append(vals, s.String())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Kind() == protoreflect.StringKind:
			vals = append(vals, v.String())
		}
	})
	slices.SortFunc(vals, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return vals
}

// scrubSecrets removes from a plugin's message any secret value the request
// carried: plugins do echo credentials in errors ("login failed for
// user:password"), and the message ends up in logs and the operator's view.
func scrubSecrets(msg string, req proto.Message) string {
	if msg == "" {
		return msg
	}
	for _, v := range secretValues(req) {
		if v != "" {
			msg = strings.ReplaceAll(msg, v, Redacted)
		}
	}
	return msg
}

// walkSecrets calls fn for every populated secret field in m and in the
// messages nested in it.
func walkSecrets(m protoreflect.Message, fn func(protoreflect.Message, protoreflect.FieldDescriptor)) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case isSecret(fd):
			fn(m, fd)
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walkSecrets(mv.Message(), fn)
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				l := v.List()
				for i := range l.Len() {
					walkSecrets(l.Get(i).Message(), fn)
				}
			}
		case fd.Message() != nil:
			walkSecrets(v.Message(), fn)
		}
		return true
	})
}

func isSecret(fd protoreflect.FieldDescriptor) bool {
	opts, ok := fd.Options().(*descriptorpb.FieldOptions)
	if !ok || opts == nil {
		return false
	}
	secret, _ := proto.GetExtension(opts, csipb.E_CsiSecret).(bool)
	return secret
}
