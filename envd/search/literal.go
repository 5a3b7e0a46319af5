package search

import (
	"bytes"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

// matcher finds matching lines: with a literal every match must contain,
// bytes.Index (or an ASCII case-folding search) picks the candidate lines
// and the regular expression only checks those; a pattern that is that
// literal needs no regular expression at all.
type matcher struct {
	re *regexp.Regexp
	// lit is a string every match contains (lower case when fold), or nil.
	lit  []byte
	fold bool
	// complete says a match is exactly lit: no regular expression runs.
	complete bool
}

func newMatcher(pattern string, literal, ignoreCase bool) (*matcher, error) {
	src := patternSource(pattern, literal, ignoreCase)
	re, err := regexp.Compile(src)
	if err != nil {
		return nil, err
	}
	m := &matcher{re: re}
	m.lit, m.fold, m.complete = requiredLiteral(src)
	return m, nil
}

// requiredLiteral returns a literal that every match of the regular
// expression src contains: src itself when it is a literal, else the
// longest literal of a top-level concatenation. A case-folded literal is
// used only when it is ASCII without k or s, whose folds include non-ASCII
// letters (K is also U+212A, s also U+017F), so an ASCII search finds all
// its matches.
func requiredLiteral(src string) (lit []byte, fold, complete bool) {
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return nil, false, false
	}
	re = re.Simplify()
	var best *syntax.Regexp
	switch re.Op {
	case syntax.OpLiteral:
		best, complete = re, true
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if sub.Op == syntax.OpLiteral && (best == nil || len(string(sub.Rune)) > len(string(best.Rune))) {
				best = sub
			}
		}
	}
	if best == nil {
		return nil, false, false
	}
	s := string(best.Rune)
	fold = best.Flags&syntax.FoldCase != 0
	if fold {
		for i := 0; i < len(s); i++ {
			c := s[i] | 0x20
			if s[i] >= utf8.RuneSelf || c == 'k' || c == 's' {
				return nil, false, false
			}
		}
		s = string(bytes.ToLower([]byte(s)))
	}
	if s == "" || bytes.IndexByte([]byte(s), '\n') >= 0 {
		// A literal with a newline is never inside one line: leave it to
		// the regular expression, which then matches nothing.
		return nil, false, false
	}
	return []byte(s), fold, complete
}

// candidate returns the offset in data of the first place a match may
// start or lie, or -1 when no line of data can match.
func (m *matcher) candidate(data []byte) int {
	switch {
	case m.lit == nil:
		loc := m.re.FindIndex(data)
		if loc == nil {
			return -1
		}
		return loc[0]
	case m.fold:
		return indexFold(data, m.lit)
	default:
		return bytes.Index(data, m.lit)
	}
}

// matchLine returns where the first match in line starts, or -1; at is the
// candidate's offset in it.
func (m *matcher) matchLine(line []byte, at int) int {
	if m.complete {
		return at
	}
	loc := m.re.FindIndex(line)
	if loc == nil {
		return -1
	}
	return loc[0]
}

// indexFold returns the offset of the first occurrence of lit (lower-case
// ASCII) in s regardless of ASCII case, or -1.
func indexFold(s, lit []byte) int {
	n := len(lit)
	lo := lit[0]
	up := lo
	if 'a' <= lo && lo <= 'z' {
		up = lo - 'a' + 'A'
	}
	for i := 0; i+n <= len(s); i++ {
		win := s[i : len(s)-n+1]
		j := bytes.IndexByte(win, lo)
		if up != lo {
			lim := win
			if j >= 0 {
				lim = win[:j]
			}
			if k := bytes.IndexByte(lim, up); k >= 0 {
				j = k
			}
		}
		if j < 0 {
			return -1
		}
		i += j
		if equalFoldASCII(s[i:i+n], lit) {
			return i
		}
	}
	return -1
}

// equalFoldASCII reports whether a equals lit (lower-case ASCII, as long)
// regardless of ASCII case.
func equalFoldASCII(a, lit []byte) bool {
	for i, c := range lit {
		b := a[i]
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if b != c {
			return false
		}
	}
	return true
}
