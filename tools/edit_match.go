package tools

import (
	"fmt"
	"strings"
)

// maxSimilarityLines bounds the old_text lines compared when looking for the
// closest match (the first ones).
const maxSimilarityLines = 8

// notFoundText explains that old is not in content: where the text matches
// when whitespace is ignored, or else the most similar lines, with their
// line numbers.
func notFoundText(content, old string) string {
	fileLines := splitLines(content)
	oldLines := splitLines(old)
	if len(oldLines) == 0 || len(fileLines) == 0 {
		return "was not found in the file (the file is empty)"
	}
	if at := findIgnoringSpace(fileLines, oldLines); at >= 0 {
		return fmt.Sprintf("was not found exactly, but matches lines %d-%d when whitespace is ignored: the indentation or spacing differs (tabs vs spaces, trailing spaces, blank lines). The file has:\n%s\nCopy old_text exactly from the file (read_files shows it)",
			at+1, at+len(oldLines), numbered(fileLines, at, at+len(oldLines)-1))
	}
	at, score := closestWindow(fileLines, oldLines)
	if score < 0.3 {
		return "was not found in the file, and no lines resemble it; check the path, or read the file with read_files to see its text"
	}
	end := min(at+len(oldLines), len(fileLines)) - 1
	return fmt.Sprintf("was not found in the file. The most similar text is at line %d (%d%% alike):\n%s\nCopy old_text exactly from the file (whitespace and indentation included); read_files shows it",
		at+1, int(score*100), numbered(fileLines, at, end))
}

// splitLines splits s into lines without their line ends.
func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

// numbered renders lines[from..to] as "  12\ttext" lines.
func numbered(lines []string, from, to int) string {
	var b strings.Builder
	for i := from; i <= to && i < len(lines); i++ {
		fmt.Fprintf(&b, "%6d\t%s\n", i+1, shortLine(lines[i]))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// squash drops all whitespace of s.
func squash(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\r' || r == '\v' || r == '\f' {
			return -1
		}
		return r
	}, s)
}

// findIgnoringSpace returns the first line where oldLines match fileLines
// with all whitespace ignored (blank lines of old skipped at the ends), or -1.
func findIgnoringSpace(fileLines, oldLines []string) int {
	want := make([]string, len(oldLines))
	for i, l := range oldLines {
		want[i] = squash(l)
	}
	for at := 0; at+len(want) <= len(fileLines); at++ {
		ok := true
		for j, w := range want {
			if squash(fileLines[at+j]) != w {
				ok = false
				break
			}
		}
		if ok {
			return at
		}
	}
	return -1
}

// closestWindow returns where the window of fileLines most like oldLines
// starts, and how alike it is (0 to 1), by the bigram similarity of the
// first lines of old.
func closestWindow(fileLines, oldLines []string) (int, float64) {
	k := min(len(oldLines), maxSimilarityLines)
	grams := make([]map[string]int, k)
	for j := range k {
		grams[j] = bigrams(oldLines[j])
	}
	// Line-against-line scores are computed once per file line and old line.
	best, bestScore := 0, -1.0
	cache := make([][]float64, k)
	for j := range k {
		cache[j] = make([]float64, len(fileLines))
	}
	for i, l := range fileLines {
		b := bigrams(l)
		for j := range k {
			cache[j][i] = dice(grams[j], b)
		}
	}
	for at := range fileLines {
		total, n := 0.0, 0
		for j := 0; j < k && at+j < len(fileLines); j++ {
			total += cache[j][at+j]
			n++
		}
		if score := total / float64(k); n > 0 && score > bestScore {
			best, bestScore = at, score
		}
	}
	return best, bestScore
}

// bigrams counts the two-character pieces of s, whitespace squashed.
func bigrams(s string) map[string]int {
	r := []rune(strings.Join(strings.Fields(s), " "))
	m := make(map[string]int, len(r))
	for i := 0; i+1 < len(r); i++ {
		m[string(r[i:i+2])]++
	}
	if len(r) == 1 {
		m[string(r)]++
	}
	return m
}

// dice is the Dice coefficient of two bigram counts.
func dice(a, b map[string]int) float64 {
	na, nb, common := 0, 0, 0
	for _, c := range a {
		na += c
	}
	for g, c := range b {
		nb += c
		common += min(c, a[g])
	}
	if na+nb == 0 {
		return 1
	}
	return 2 * float64(common) / float64(na+nb)
}
