// Command graph runs breadth-first search and connected components over
// graphs kept in a bam store, with the edges on storage, on the GPU engine
// when a GPU is present and on the CPU engine otherwise.
//
// Usage:
//
//	go run ./examples/graph gen    STORE NAME [--kind kron|urand] [--scale 20] [--edge-factor 16] [--seed 1] [--directed]
//	go run ./examples/graph import STORE NAME FILE --format snap|mtx|bel|raw32|raw64 [--symmetrize]
//	go run ./examples/graph bfs    STORE NAME [--source V] [--engine auto|cpu|gpu] [--cache SIZE] [--gpu-line N] [--queues N] [--validate] [--out DIR]
//	go run ./examples/graph cc     STORE NAME [--engine auto|cpu|gpu] [--cache SIZE] [--gpu-line N] [--queues N] [--validate] [--out DIR]
//	go run ./examples/graph bench  [--store DIR] [--scale 25] [--kinds kron,urand] [--cache-fractions 0.125,0.25,0.5]
//	go run ./examples/graph demo   [--dir DIR] [--scale 20]
//
// Every command that reports numbers accepts --json; bfs --json on the GPU
// adds a level trace (direction, frontier, time and bytes read per level).
// gen and import create the store when it does not exist; --keep-self-loops
// and --keep-duplicates keep what is dropped by default.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
)

type command struct {
	name, usage, summary string
	run                  func(ctx context.Context, args []string) error
}

var commands []*command

var errUsage = errors.New("usage")

func usagef(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// stdout and stderr of the running command (tests replace them).
var stdout, stderr io.Writer = os.Stdout, os.Stderr

func run(ctx context.Context, args []string, out, errw io.Writer) int {
	stdout, stderr = out, errw
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		help(out)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(ctx, args[1:])
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				fmt.Fprintf(errw, "graph %s: %v\nusage: graph %s %s\n", c.name, err, c.name, c.usage)
				return 2
			}
			fmt.Fprintf(errw, "graph %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(errw, "graph: unknown command %q\n", args[0])
	help(errw)
	return 2
}

func help(w io.Writer) {
	fmt.Fprintln(w, "usage: graph <command> [flags] [args]")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-7s %s\n          %s\n", c.name, c.usage, c.summary)
	}
}

// parse parses flags given before, between and after the positional
// arguments, and checks their count.
func parse(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(stderr)
				fs.PrintDefaults()
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != want {
		return nil, usagef("want %d arguments, got %d (%s)", want, len(pos), strings.Join(pos, " "))
	}
	return pos, nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
