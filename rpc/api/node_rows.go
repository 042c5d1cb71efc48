package api

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strconv"
)

// NodeRow is what a node list shows of each node (`berth node status`
// without an ID): the columns of its table, decoded from the API's JSON
// with encoding/json into this struct instead of into a *pb.Node.
//
// Why not the message: the first protobuf message a process decodes
// initialises protobuf's reflection for its type, the file descriptor it
// is declared in and every message it holds, which cost `berth node
// status` about 1 ms of its ~13 ms on this machine (issue 26), for eight
// columns. NodeRow names the fields it reads by their API names, which
// apijson writes from the .proto (TestNodeRowsReadWhatTheAPIWrites holds
// it to apijson's encoding of a pb.Node); every other field of the answer
// is skipped. Client.Nodes returns the whole message.
type NodeRow struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Status      Word   `json:"status"`
	Eligibility Word   `json:"eligibility"`
	// Draining is whether the node has a drain strategy (a non-null
	// "drain").
	Draining draining `json:"drain"`
	// Drivers are the node's drivers by name, with their health.
	Drivers map[string]struct {
		Healthy bool `json:"healthy"`
	} `json:"drivers"`
	HTTPAddr    string `json:"http_addr"`
	Fingerprint struct {
		BerthVersion string `json:"berth_version"`
	} `json:"fingerprint"`
}

// NodeRows reads one page of the node list as rows (a ListFunc).
//
// It asks for list stubs (?stub=true): a node without its drivers' task
// schemas, attributes, resources and plugins, a fifth of the bytes to
// encode and decode. An agent that does not know the parameter answers
// whole nodes, which read the same.
func (c *Client) NodeRows(ctx context.Context, q *QueryOptions) ([]NodeRow, *QueryMeta, error) {
	sq := QueryOptions{}
	if q != nil {
		sq = *q
	}
	sq.Params = maps.Clone(sq.Params)
	if sq.Params == nil {
		sq.Params = map[string]string{}
	}
	sq.Params["stub"] = "true"
	var rows []NodeRow
	meta, err := c.getJSON(ctx, "/v1/nodes", &sq, &rows)
	if err != nil {
		return nil, nil, err
	}
	return rows, meta, nil
}

// Word is an enum as the API writes it: its word ("ready"), or, for a
// value this version does not know (a newer server's), the number, which
// Word keeps as its decimal text, as pb.EnumWord prints it.
type Word string

// UnmarshalJSON reads a JSON string or number (null leaves w as it is).
func (w *Word) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*w = Word(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	if _, err := strconv.ParseInt(string(n), 10, 32); err != nil {
		return err
	}
	*w = Word(n)
	return nil
}

// draining is true for any JSON value but null.
type draining bool

func (d *draining) UnmarshalJSON(b []byte) error {
	*d = draining(!bytes.Equal(bytes.TrimSpace(b), []byte("null")))
	return nil
}
