package taxi

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// timeLayouts are the timestamp formats of TLC CSV files.
var timeLayouts = []string{
	"2006-01-02 15:04:05",
	time.RFC3339,
	"2006-01-02T15:04:05",
	"01/02/2006 03:04:05 PM",
	"2006-01-02 15:04:05.999999",
}

// ReadCSVFile reads a CSV trip file (see ReadCSV).
func ReadCSVFile(path string, cab uint8) (*Batch, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("taxi: %w", err)
	}
	defer f.Close()
	return ReadCSV(f, path, cab)
}

// ReadCSV reads CSV trip records with a header line naming the columns
// (TLC names of any year; unknown columns are ignored). Empty fields are
// NULL; times are UTC. name labels errors. It fails with ErrFormat for a
// missing header or trip_distance column, a row with the wrong number of
// fields, or a field that does not parse.
func ReadCSV(r io.Reader, name string, cab uint8) (*Batch, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s: empty file (want a header line)", ErrFormat, name)
		}
		return nil, fmt.Errorf("%w: %s: header: %v", ErrFormat, name, err)
	}
	header = slices.Clone(header) // the reader reuses its record
	cols := make([]Col, len(header))
	seen := map[Col]bool{}
	for k, h := range header {
		c, ok := ColByName(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		if !ok || seen[c] {
			cols[k] = -1
			continue
		}
		cols[k] = c
		seen[c] = true
	}
	if !seen[TripDistance] {
		return nil, fmt.Errorf("%w: %s: no trip_distance column in header %q", ErrFormat, name, strings.Join(header, ","))
	}
	bl := newBuilder(cab)
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrFormat, name, err)
		}
		i := bl.addRows(1)
		for k, field := range rec {
			c := cols[k]
			if c < 0 {
				continue
			}
			v, err := parseField(c, strings.TrimSpace(field))
			if err != nil {
				return nil, fmt.Errorf("%w: %s: line %d, column %s: %v", ErrFormat, name, line, header[k], err)
			}
			if err := bl.set(c, i, v); err != nil {
				return nil, err
			}
		}
	}
	return bl.b, nil
}

func parseField(c Col, s string) (cell, error) {
	if s == "" || strings.EqualFold(s, "null") || strings.EqualFold(s, "nan") {
		return cell{null: true}, nil
	}
	if c == PickupTime || c == DropoffTime {
		for _, l := range timeLayouts {
			if t, err := time.Parse(l, s); err == nil {
				return cell{num: true, f: float64(t.Unix())}, nil
			}
		}
		return cell{}, fmt.Errorf("time %q in none of the known layouts", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err == nil {
		return cell{num: true, f: f}, nil
	}
	switch c {
	case PaymentType, VendorID, CabType:
		return cell{s: s}, nil
	}
	return cell{}, fmt.Errorf("number %q: %w", s, errors.Unwrap(err))
}
