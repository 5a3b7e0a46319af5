package tools

import "strings"

// A command line of plain words ("ls -la src", "python3 app.py", "true")
// needs no shell: bash would only look its first word up in PATH and run
// it with the words as arguments. Such a line runs directly, with the same
// environment the shell would give it, so a foreground command costs one
// process, not a shell and then the process. Anything with shell syntax
// (quotes, variables, globs, redirections, pipes, ~, comments, several
// commands), an assignment, or a first word that is a shell builtin or
// keyword goes through the shell as before. A first word that is not an
// executable in PATH also goes through the shell, after the direct start
// failed, so the model reads the shell's own "command not found" (nothing
// ran: the start failed before any process existed).

// plainWords splits line into its words when it is a command line of plain
// words that bash would run as a simple command, and returns false
// otherwise.
func plainWords(line string) ([]string, bool) {
	words := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(words) == 0 {
		return nil, false
	}
	for _, w := range words {
		for i := 0; i < len(w); i++ {
			if !plainByte(w[i]) {
				return nil, false
			}
		}
	}
	first := words[0]
	if strings.Contains(first, "=") || shellWords[first] {
		return nil, false
	}
	return words, true
}

// plainByte reports whether b is safe unquoted in any position of a word:
// bash gives it no meaning of its own.
func plainByte(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("_./:,+@%=-", b) >= 0
}

// shellWords are bash's builtins and reserved words, which a direct start
// would not find or would run differently (cd, export, pwd, echo, …).
// true and false are not among them: /bin/true and /bin/false do what the
// builtins do.
var shellWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`alias bg bind break builtin caller cd command compgen complete compopt
		continue declare dirs disown echo enable eval exec exit export fc fg getopts hash help history jobs
		kill let local logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt
		source suspend test times trap type typeset ulimit umask unalias unset wait . [ [[ ]] ! { }
		if then else elif fi case esac for select while until do done in function time coproc`) {
		m[w] = true
	}
	return m
}()
