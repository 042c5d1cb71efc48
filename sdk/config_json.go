package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/internal/sdkerr"
)

// ErrConfigJSON is returned by ParseConfigJSON when its input is not a JSON
// object of config values.
var ErrConfigJSON = sdkerr.New(codes.InvalidArgument, "CONFIG_JSON", "invalid config JSON")

// ParseConfigJSON decodes a config written as a JSON object, e.g. a job's
// config block in a JSON job spec (or an HCL body converted with
// ctyjson). Values map to config values by their JSON type: string, integer
// number, bool, array of strings, object of strings. Durations are written
// as strings ("30s") and converted by ConfigSpec.Validate. Errors name the
// key.
func ParseConfigJSON(data []byte) (ConfigMap, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfigJSON, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("%w: expected an object, got null", ErrConfigJSON)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: unexpected data after the object", ErrConfigJSON)
	}
	out := make(ConfigMap, len(raw))
	for key, msg := range raw {
		v, err := jsonValue(msg)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrConfigJSON, key, err)
		}
		out[key] = v
	}
	return out, nil
}

func jsonValue(msg json.RawMessage) (*driverpb.ConfigValue, error) {
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case string:
		return StringValue(v), nil
	case bool:
		return BoolValue(v), nil
	case json.Number:
		i, err := strconv.ParseInt(v.String(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("number %s is not a 64-bit integer", v)
		}
		return IntValue(i), nil
	case []any:
		items := make([]string, len(v))
		for i, item := range v {
			s, ok := item.(string)
			if !ok {
				return nil, fmt.Errorf("list item %d is not a string", i)
			}
			items[i] = s
		}
		return ListValue(items...), nil
	case map[string]any:
		m := make(map[string]string, len(v))
		for k, item := range v {
			s, ok := item.(string)
			if !ok {
				return nil, fmt.Errorf("map value %q is not a string", k)
			}
			m[k] = s
		}
		return MapValue(m), nil
	case nil:
		return nil, errors.New("null is not a config value (leave the key out instead)")
	}
	return nil, fmt.Errorf("unsupported JSON value %T", v)
}
