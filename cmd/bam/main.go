// Command bam manages stores of arrays and key-value tables on NVMe SSDs or
// files and measures the machine they run on.
//
// Usage:
//
//	bam <command> [flags] [args]
//
// Run `bam help` for the list of commands. Every command that reports
// numbers accepts --json.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"

	"github.com/bam-go/bam/internal/cpuprofile"
)

// command is one subcommand of bam. Each lives in its own file and registers
// itself from an init function.
type command struct {
	name    string
	usage   string // argument synopsis, e.g. "STORE NAME FILE [--type T]"
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a command sees of the process: its output streams and whether
// stdout is a terminal (progress bars are drawn only then).
type env struct {
	stdout, stderr io.Writer
	terminal       bool
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("bam: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks errors caused by bad command-line arguments (exit status 2).
var errUsage = errors.New("usage")

func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	e := &env{stdout: os.Stdout, stderr: os.Stderr, terminal: isTerminal(os.Stdout)}
	stopProfile := cpuprofile.FromEnv("bam", e.stderr)
	code := runMain(ctx, e, os.Args[1:])
	stopProfile()
	os.Exit(code)
}

func runMain(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printHelp(e.stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "bam: unknown command %q\n\n", args[0])
		printHelp(e.stderr)
		return 2
	}
	if err := c.run(ctx, e, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(e.stderr, "bam %s: %v\n", c.name, err)
		if errors.Is(err, errUsage) {
			fmt.Fprintf(e.stderr, "usage: bam %s %s\n", c.name, c.usage)
			return 2
		}
		return 1
	}
	return 0
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "bam: arrays and key-value tables on NVMe storage, with GPU-orchestrated access.")
	fmt.Fprintln(w, "\nUsage: bam <command> [flags] [args]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := commands[n]
		fmt.Fprintf(w, "  %-8s %-40s %s\n", n, c.usage, c.summary)
	}
}

// newFlags returns a flag set for a subcommand that reports errors instead of
// exiting, writing usage to the command's stderr.
func newFlags(e *env, c string) *flag.FlagSet {
	fs := flag.NewFlagSet("bam "+c, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parseInterleaved parses flags that may appear before, between or after
// positional arguments and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
