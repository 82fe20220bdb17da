// Command bansummary prints the messages of the ban topic by scenario
// (action, scope and reason: a ban of an ip for credential_stuffing), each
// with its count and its earliest message as an example, in the order of
// those. It reads JSON values, one after another, from
// the files named or from its input: what kcat prints with -f '%s\n'.
// make demo prints the bans of its run with it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "bansummary:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

const usage = `Usage: bansummary [file...]

Prints ban-topic messages (JSON values, as kcat -f '%s\n' prints them) by
scenario, each with its count and an example; reads its input when no file
is named.
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bansummary", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		io.WriteString(stderr, usage)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	var in io.Reader = stdin
	if fs.NArg() > 0 {
		var readers []io.Reader
		for _, name := range fs.Args() {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			readers = append(readers, f)
		}
		in = io.MultiReader(readers...)
	}
	s, err := summarize(in)
	if err != nil {
		return err
	}
	s.write(stdout)
	return nil
}
