package taxi

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/bam-go/bam"
)

// ImportOptions configure Import.
type ImportOptions struct {
	// CabType is stored in rows of files without a cab_type column.
	// Default: green for files whose name starts with "green", yellow
	// otherwise.
	CabType   *uint8
	Overwrite bool
}

// Import reads TLC trip files (Parquet: .parquet; CSV with a header line:
// .csv) into memory and writes them, in order, as table name.
func Import(ctx context.Context, s *bam.Store, name string, files []string, opts ImportOptions) (*Table, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no input files", ErrInvalid)
	}
	var batches []*Batch
	var rows uint64
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cab := CabYellow
		if strings.HasPrefix(strings.ToLower(filepath.Base(f)), "green") {
			cab = CabGreen
		}
		if opts.CabType != nil {
			cab = *opts.CabType
		}
		var b *Batch
		var err error
		switch ext := strings.ToLower(filepath.Ext(f)); ext {
		case ".parquet", ".parq":
			b, err = ReadParquetFile(f, cab)
		case ".csv":
			b, err = ReadCSVFile(f, cab)
		default:
			return nil, fmt.Errorf("%w: %s: unknown file type %q (want .parquet or .csv)", ErrInvalid, f, ext)
		}
		if err != nil {
			return nil, err
		}
		batches = append(batches, b)
		rows += uint64(b.N)
	}
	t, err := create(ctx, s, name, rows, opts.Overwrite)
	if err != nil {
		return nil, err
	}
	var at uint64
	for _, b := range batches {
		if err := t.writeBatch(ctx, at, b); err != nil {
			return nil, err
		}
		at += uint64(b.N)
	}
	src := strings.Join(files, ",")
	if len(src) > 4096 {
		src = fmt.Sprintf("%d files", len(files))
	}
	if err := t.publish(ctx, map[string]string{metaSource: src}); err != nil {
		return nil, err
	}
	return t, nil
}

// cell is one input value before conversion to its column's type.
type cell struct {
	null bool
	num  bool    // f holds a number
	f    float64 // number, or seconds since 1970 for times
	s    string  // text that is not a number
}

// builder accumulates rows of every column; columns a file lacks stay
// NULL.
type builder struct {
	b   *Batch
	cab uint8
}

func newBuilder(cab uint8) *builder { return &builder{b: NewBatch(0), cab: cab} }

// addRows appends n NULL rows (cab_type set) and returns the first index.
func (bl *builder) addRows(n int) int {
	b := bl.b
	first := b.N
	for c := range NumCols {
		sz := Schema[c].Type.Size()
		b.Raw[c] = append(b.Raw[c], make([]byte, n*sz)...)
	}
	b.N += n
	for i := first; i < b.N; i++ {
		for c := range NumCols {
			b.SetNull(c, i)
		}
		b.Raw[CabType][i] = bl.cab
	}
	return first
}

var paymentNames = map[string]uint8{
	"credit": 1, "cre": 1, "crd": 1, "card": 1,
	"cash": 2, "cas": 2, "csh": 2,
	"no charge": 3, "noc": 3, "no": 3,
	"dispute": 4, "dis": 4,
	"unknown": 5, "unk": 5,
	"voided": 6,
}

var vendorNames = map[string]uint8{"cmt": 1, "vts": 2, "dds": 3}

// set converts v into column c of row i by the package's rules: values
// that do not fit the column are NULL.
func (bl *builder) set(c Col, i int, v cell) error {
	b := bl.b
	if v.null {
		if c == CabType {
			return nil // keep the file's cab type
		}
		b.SetNull(c, i)
		return nil
	}
	if !v.num {
		s := strings.ToLower(strings.TrimSpace(v.s))
		switch c {
		case PaymentType:
			if p, ok := paymentNames[s]; ok {
				b.U8(c)[i] = p
				return nil
			}
		case VendorID:
			if p, ok := vendorNames[s]; ok {
				b.U8(c)[i] = p
				return nil
			}
		case CabType:
			switch s {
			case "yellow":
				b.U8(c)[i] = CabYellow
				return nil
			case "green":
				b.U8(c)[i] = CabGreen
				return nil
			}
		}
		b.SetNull(c, i)
		return nil
	}
	f := v.f
	switch Schema[c].Type {
	case Float32:
		b.F32(c)[i] = float32(f)
	case Uint32: // times, in seconds
		if f >= 1 && f < 1<<32 {
			b.U32(c)[i] = uint32(f)
		} else {
			b.SetNull(c, i)
		}
	case Int8:
		if f >= 0 && f <= 127 && f == math.Trunc(f) {
			b.I8(c)[i] = int8(f)
		} else {
			b.SetNull(c, i)
		}
	case Uint8:
		if f >= 0 && f < float64(NullU8) && f == math.Trunc(f) {
			b.U8(c)[i] = uint8(f)
		} else {
			b.SetNull(c, i)
		}
	case Uint16:
		if f >= 0 && f < float64(NullU16) && f == math.Trunc(f) {
			b.U16(c)[i] = uint16(f)
		} else {
			b.SetNull(c, i)
		}
	}
	return nil
}
