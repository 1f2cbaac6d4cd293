package taxi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// ReadParquetFile reads a Parquet trip file (see ReadParquet).
func ReadParquetFile(path string, cab uint8) (*Batch, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("taxi: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("taxi: %w", err)
	}
	return ReadParquet(f, st.Size(), path, cab)
}

// ReadParquet reads a TLC trip-record Parquet file: top-level columns are
// matched to the schema by name (the names of every year, any case);
// integers, floats and doubles convert to the column's type; timestamps
// may be INT64 with a TIMESTAMP logical type (milli-, micro- or
// nanoseconds; microseconds when unannotated) or INT96; strings are
// accepted for payment_type, vendor_id and cab_type. name labels errors.
// It fails with ErrFormat for a file that is not Parquet, is truncated,
// has no trip_distance column or holds a type a column cannot take.
func ReadParquet(r io.ReaderAt, size int64, name string, cab uint8) (b *Batch, err error) {
	defer func() {
		// The decoder is not ours: turn a panic on a hostile file into an error.
		if p := recover(); p != nil {
			b, err = nil, fmt.Errorf("%w: %s: %v", ErrFormat, name, p)
		}
	}()
	pf, err := parquet.OpenFile(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, name, err)
	}
	type leaf struct {
		col  Col
		idx  int
		unit time.Duration // timestamps
	}
	var leaves []leaf
	seen := map[Col]bool{}
	for _, path := range pf.Schema().Columns() {
		if len(path) != 1 {
			continue
		}
		c, ok := ColByName(path[0])
		if !ok || seen[c] {
			continue
		}
		lc, ok := pf.Schema().Lookup(path...)
		if !ok {
			continue
		}
		l := leaf{col: c, idx: lc.ColumnIndex, unit: time.Microsecond}
		if lt := lc.Node.Type().LogicalType(); lt != nil {
			if ts, ok := lt.Value.(*format.TimestampType); ok && ts.Unit.Value != nil {
				l.unit = ts.Unit.Value.Duration()
			}
		}
		leaves = append(leaves, l)
		seen[c] = true
	}
	if !seen[TripDistance] {
		return nil, fmt.Errorf("%w: %s: no trip_distance column (columns %v)", ErrFormat, name, pf.Schema().Columns())
	}
	nrows := pf.NumRows()
	// Real trip files hold well under one row per byte; a footer claiming
	// far more is corrupt (and would make us allocate without bound).
	if nrows < 0 || nrows > 16*size+4096 {
		return nil, fmt.Errorf("%w: %s: footer claims %d rows in %d bytes", ErrFormat, name, nrows, size)
	}
	bl := newBuilder(cab)
	bl.addRows(int(nrows))
	vals := make([]parquet.Value, 4096)
	var base int64
	for g, rg := range pf.RowGroups() {
		chunks := rg.ColumnChunks()
		for _, l := range leaves {
			if l.idx >= len(chunks) {
				return nil, fmt.Errorf("%w: %s: row group %d lacks column %s", ErrFormat, name, g, Schema[l.col].Name)
			}
			row := base
			pages := chunks[l.idx].Pages()
			for {
				p, err := pages.ReadPage()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					pages.Close()
					return nil, fmt.Errorf("%w: %s: row group %d, column %s: %v", ErrFormat, name, g, Schema[l.col].Name, err)
				}
				vr := p.Values()
				for {
					n, err := vr.ReadValues(vals)
					for _, v := range vals[:n] {
						if row >= base+rg.NumRows() {
							pages.Close()
							return nil, fmt.Errorf("%w: %s: row group %d, column %s: more values than its %d rows", ErrFormat, name, g, Schema[l.col].Name, rg.NumRows())
						}
						cv, cerr := parquetCell(l.col, v, l.unit)
						if cerr != nil {
							pages.Close()
							return nil, fmt.Errorf("%w: %s: row %d, column %s: %v", ErrFormat, name, row, Schema[l.col].Name, cerr)
						}
						if err := bl.set(l.col, int(row), cv); err != nil {
							pages.Close()
							return nil, err
						}
						row++
					}
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						pages.Close()
						return nil, fmt.Errorf("%w: %s: row group %d, column %s: %v", ErrFormat, name, g, Schema[l.col].Name, err)
					}
				}
			}
			pages.Close()
			if row != base+rg.NumRows() {
				return nil, fmt.Errorf("%w: %s: row group %d, column %s: %d values for %d rows", ErrFormat, name, g, Schema[l.col].Name, row-base, rg.NumRows())
			}
		}
		base += rg.NumRows()
	}
	if base != nrows {
		return nil, fmt.Errorf("%w: %s: row groups hold %d rows, footer says %d", ErrFormat, name, base, nrows)
	}
	return bl.b, nil
}

// julianUnixEpoch is the Julian day number of 1970-01-01.
const julianUnixEpoch = 2440588

func parquetCell(c Col, v parquet.Value, unit time.Duration) (cell, error) {
	if v.IsNull() {
		return cell{null: true}, nil
	}
	isTime := c == PickupTime || c == DropoffTime
	var f float64
	switch v.Kind() {
	case parquet.Boolean:
		if v.Boolean() {
			f = 1
		}
	case parquet.Int32:
		f = float64(v.Int32())
	case parquet.Int64:
		if isTime {
			per := int64(time.Second / max(unit, time.Nanosecond))
			x := v.Int64()
			secs := x / per
			if x%per < 0 {
				secs-- // floor, for times before 1970 (stored as NULL)
			}
			return cell{num: true, f: float64(secs)}, nil
		}
		f = float64(v.Int64())
	case parquet.Int96:
		if !isTime {
			return cell{}, fmt.Errorf("INT96 value in a non-time column")
		}
		var raw [12]byte
		i96 := v.Int96()
		for k := range 3 {
			binary.LittleEndian.PutUint32(raw[4*k:], i96[k])
		}
		nanos := int64(binary.LittleEndian.Uint64(raw[:8]))
		day := int64(binary.LittleEndian.Uint32(raw[8:]))
		return cell{num: true, f: float64((day-julianUnixEpoch)*86400 + nanos/1e9)}, nil
	case parquet.Float:
		f = float64(v.Float())
	case parquet.Double:
		f = v.Double()
	case parquet.ByteArray, parquet.FixedLenByteArray:
		s := string(v.ByteArray())
		if isTime {
			for _, l := range timeLayouts {
				if t, err := time.Parse(l, s); err == nil {
					return cell{num: true, f: float64(t.Unix())}, nil
				}
			}
			return cell{}, fmt.Errorf("time %q in none of the known layouts", s)
		}
		if c == PaymentType || c == VendorID || c == CabType {
			return cell{s: s}, nil
		}
		pc, err := parseField(c, strings.TrimSpace(s))
		if err != nil {
			return cell{}, err
		}
		return pc, nil
	default:
		return cell{}, fmt.Errorf("unsupported Parquet type %v", v.Kind())
	}
	if isTime {
		return cell{}, fmt.Errorf("%v value for a timestamp", v.Kind())
	}
	return cell{num: true, f: f}, nil
}
