package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"berth.dev/berth/rpc/pb"
)

// printHostVolumes shows the node's host volumes, when it has any.
func printHostVolumes(w io.Writer, n *pb.Node) error {
	if len(n.GetHostVolumes()) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nHost Volumes")
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Name\tRead Only\tPath")
	for _, name := range slices.Sorted(maps.Keys(n.GetHostVolumes())) {
		hv := n.GetHostVolumes()[name]
		fmt.Fprintf(tw, "%s\t%t\t%s\n", name, hv.GetReadOnly(), hv.GetPath())
	}
	return tw.Flush()
}
