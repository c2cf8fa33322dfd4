package main

import (
	"os"

	"github.com/mattn/go-isatty"
)

// stdinIsTerminal reports whether a person can answer a prompt. /dev/null
// is a character device too, so this asks the terminal driver, not Stat.
func stdinIsTerminal() bool {
	return isatty.IsTerminal(os.Stdin.Fd())
}
