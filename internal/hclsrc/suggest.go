package hclsrc

// Suggest returns the candidate closest to name when it is close enough to
// be a typo: at most two edits away, and fewer edits than name has
// characters (otherwise "x" would be a typo of "=", and "" of anything short).
func Suggest(name string, candidates []string) string {
	best, bestDist := "", min(3, len([]rune(name)))
	for _, c := range candidates {
		if dist := editDistance(name, c); dist < bestDist {
			best, bestDist = c, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	row := make([]int, len(rb)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			diag, row[j] = row[j], min(row[j]+1, row[j-1]+1, diag+cost)
		}
	}
	return row[len(rb)]
}
