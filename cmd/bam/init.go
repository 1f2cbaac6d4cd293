package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/bam-go/bam"
)

func init() {
	register(&command{
		name:    "init",
		usage:   "STORE [--ns N] --size SIZE | --dev DEV [--dev DEV ...] [--line 4KiB] [--json]",
		summary: "create a store: a directory of namespace files, or block devices",
		run:     runInit,
	})
}

func runInit(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "init")
	ns := fs.Int("ns", 1, "number of namespace files")
	size := fs.String("size", "", "size of each namespace file (e.g. 64MiB, 10GB)")
	line := fs.String("line", "4KiB", "line size: cache line and stripe unit, 512B..64KiB")
	lba := fs.Int("lba", 0, "logical block size of namespace files, 512 or 4096 (default 4096)")
	catalog := fs.String("catalog", "", "size of each of the two catalog slots (default 1MiB)")
	force := fs.Bool("force", false, "overwrite devices that already hold a store")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	var devs []string
	fs.Func("dev", "block device (or existing file) to use as a namespace; repeat for more", func(s string) error {
		devs = append(devs, s)
		return nil
	})
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	opts := bam.CreateOptions{Namespaces: *ns, LBASize: *lba, Overwrite: *force}
	if opts.LineSize, err = parseSizeInt(*line, "--line"); err != nil {
		return err
	}
	if *catalog != "" {
		if opts.CatalogSize, err = parseSizeFlag(*catalog, "--catalog"); err != nil {
			return err
		}
	}
	dir := ""
	switch {
	case len(devs) > 0:
		if len(pos) > 0 {
			return usageErrorf("with --dev, give no STORE directory (later commands name the store as %s)", strings.Join(devs, ","))
		}
		opts.Devices = devs
		if *size != "" {
			if opts.NamespaceSize, err = parseSizeFlag(*size, "--size"); err != nil {
				return err
			}
		}
	case len(pos) == 1:
		dir = pos[0]
		if *size == "" {
			return usageErrorf("--size is required for a directory store")
		}
		if opts.NamespaceSize, err = parseSizeFlag(*size, "--size"); err != nil {
			return err
		}
	default:
		return usageErrorf("give one STORE directory, or --dev devices")
	}
	s, err := bam.Create(ctx, dir, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	info, err := s.Info()
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	var total uint64
	for _, n := range info.Namespaces {
		total += n.DataLines * uint64(info.LineSize)
	}
	fmt.Fprintf(e.stdout, "created store %s: volume %s, %d namespaces, %s lines, %s of data space\n",
		storeName(dir, devs), info.VolumeUUID, len(info.Namespaces), formatBytes(uint64(info.LineSize)), formatBytes(total))
	return nil
}

func storeName(dir string, devs []string) string {
	if dir != "" {
		return dir
	}
	return strings.Join(devs, ",")
}

// parseByteSize parses a byte count: a number with an optional unit. IEC units
// (KiB, MiB, GiB, TiB, and the short K, M, G, T) are powers of 1024; SI
// units (kB/KB, MB, GB, TB) are powers of 1000; B or no unit means bytes.
// Fractions are allowed when the result is a whole number of bytes.
func parseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	mult := map[string]int64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
		"g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	}[strings.ToLower(unit)]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)", s, unit)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("size %q: bad number %q", s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() || r.Num().Int64() > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return r.Num().Int64(), nil
}

func parseSizeFlag(s, flagName string) (int64, error) {
	n, err := parseByteSize(s)
	if err != nil {
		return 0, usageErrorf("%s: %v", flagName, err)
	}
	return n, nil
}

func parseSizeInt(s, flagName string) (int, error) {
	n, err := parseSizeFlag(s, flagName)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt32 {
		return 0, usageErrorf("%s: %s is too large", flagName, s)
	}
	return int(n), nil
}

// formatBytes prints n with an IEC unit: 4 KiB, 1.5 GiB.
func formatBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f %s", v, units[u])
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}
