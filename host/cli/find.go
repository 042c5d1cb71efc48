package cli

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"berth.dev/berth/rpc/api"
)

// findID resolves an ID or a unique prefix of one over a list in ID order
// (nodes, jobs, allocs, evaluations) and returns the full ID. The list is
// read from next_token=prefix, a lower bound, so the first page holds the
// IDs with the prefix, and the lookup reads on only while the pages hold
// nothing else, however long the list. An exact ID wins over longer IDs it
// is a prefix of (job "web" beside job "web-2"); it sorts first. api.Pages
// refuses a token that does not advance, so a misbehaving agent cannot
// keep it reading forever. A prefix that is not UTF-8 is refused before
// anything is sent (no ID is not UTF-8; sent, the agent's refusal would
// name next_token, not the argument the user typed).
func findID[T any](ctx context.Context, kind, prefix string, list api.ListFunc[T], id func(T) string) (string, error) {
	if prefix == "" {
		return "", fmt.Errorf("no %s ID given", kind)
	}
	if !utf8.ValidString(prefix) {
		return "", fmt.Errorf("%s ID or prefix %q is not valid UTF-8 (no %s ID is)", kind, prefix, kind)
	}
	var matches []string
	past := false
	for page, err := range api.Pages(ctx, &api.QueryOptions{PerPage: 100, NextToken: prefix}, list) {
		if err != nil {
			return "", err
		}
		for _, item := range page.Items {
			got := id(item)
			if got == prefix {
				return got, nil
			}
			if !strings.HasPrefix(got, prefix) {
				past = true
				break
			}
			matches = append(matches, got)
		}
		if past {
			break
		}
	}
	switch len(matches) {
	case 0:
		return "", &noMatchError{kind, prefix}
	case 1:
		return matches[0], nil
	}
	return "", fmt.Errorf("prefix %q matches %d %ss: %s", prefix, len(matches), kind, strings.Join(matches, ", "))
}

// noMatchError is findID's answer when nothing has the ID or prefix, so a
// caller that can do without a match (volume status -node of a node no
// longer registered) tells it from a failed lookup.
type noMatchError struct{ kind, prefix string }

func (e *noMatchError) Error() string {
	return fmt.Sprintf("no %s with ID or prefix %q", e.kind, e.prefix)
}
