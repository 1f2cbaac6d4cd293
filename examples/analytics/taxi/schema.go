package taxi

import (
	"fmt"
	"math"
	"strings"
	"unsafe"
)

// Col identifies a column of a taxi table.
type Col int

// The columns of a taxi table, in schema order.
const (
	VendorID Col = iota
	PickupTime
	DropoffTime
	PassengerCount
	TripDistance
	PULocationID
	DOLocationID
	PaymentType
	FareAmount
	Extra
	MTATax
	TipAmount
	TollsAmount
	ImprovementSurcharge
	CongestionSurcharge
	TotalAmount
	CabType
	NumCols
)

// Type is a column's element type.
type Type string

// Column element types.
const (
	Uint8   Type = "uint8"
	Int8    Type = "int8"
	Uint16  Type = "uint16"
	Uint32  Type = "uint32"
	Float32 Type = "float32"
)

// Size is the element size in bytes.
func (t Type) Size() int {
	switch t {
	case Uint8, Int8:
		return 1
	case Uint16:
		return 2
	case Uint32, Float32:
		return 4
	}
	return 0
}

// Column describes one column: its stored name and type and the names it
// has in the TLC files of different years (matched case-insensitively).
type Column struct {
	Name    string
	Type    Type
	Aliases []string
}

// Schema is the table schema, indexed by Col.
var Schema = [NumCols]Column{
	VendorID:             {"vendor_id", Uint8, []string{"VendorID", "vendor_id", "vendor_name", "VendorId"}},
	PickupTime:           {"pickup_datetime", Uint32, []string{"tpep_pickup_datetime", "lpep_pickup_datetime", "pickup_datetime", "Trip_Pickup_DateTime"}},
	DropoffTime:          {"dropoff_datetime", Uint32, []string{"tpep_dropoff_datetime", "lpep_dropoff_datetime", "dropoff_datetime", "Trip_Dropoff_DateTime"}},
	PassengerCount:       {"passenger_count", Int8, []string{"passenger_count", "Passenger_Count"}},
	TripDistance:         {"trip_distance", Float32, []string{"trip_distance", "Trip_Distance"}},
	PULocationID:         {"pu_location_id", Uint16, []string{"PULocationID", "pu_location_id"}},
	DOLocationID:         {"do_location_id", Uint16, []string{"DOLocationID", "do_location_id"}},
	PaymentType:          {"payment_type", Uint8, []string{"payment_type", "Payment_Type"}},
	FareAmount:           {"fare_amount", Float32, []string{"fare_amount", "Fare_Amt", "fare_amt"}},
	Extra:                {"extra", Float32, []string{"extra", "surcharge"}},
	MTATax:               {"mta_tax", Float32, []string{"mta_tax", "mta_tax"}},
	TipAmount:            {"tip_amount", Float32, []string{"tip_amount", "Tip_Amt", "tip_amt"}},
	TollsAmount:          {"tolls_amount", Float32, []string{"tolls_amount", "Tolls_Amt", "tolls_amt"}},
	ImprovementSurcharge: {"improvement_surcharge", Float32, []string{"improvement_surcharge"}},
	CongestionSurcharge:  {"congestion_surcharge", Float32, []string{"congestion_surcharge"}},
	TotalAmount:          {"total_amount", Float32, []string{"total_amount", "Total_Amt", "total_amt"}},
	CabType:              {"cab_type", Uint8, []string{"cab_type"}},
}

// String returns the column's stored name.
func (c Col) String() string {
	if c < 0 || c >= NumCols {
		return fmt.Sprintf("col(%d)", int(c))
	}
	return Schema[c].Name
}

// ColByName finds a column by its stored name or an alias, ignoring case.
func ColByName(name string) (Col, bool) {
	for c := range NumCols {
		if strings.EqualFold(Schema[c].Name, name) {
			return c, true
		}
		for _, a := range Schema[c].Aliases {
			if strings.EqualFold(a, name) {
				return c, true
			}
		}
	}
	return 0, false
}

// NULL encodings (see the package documentation).
const (
	NullU8        uint8  = 0xFF
	NullU16       uint16 = 0xFFFF
	NullTime      uint32 = 0
	NullPassenger int8   = -1
)

// NullF32 is the float32 NULL: a quiet NaN.
var NullF32 = float32(math.NaN())

// Cab types.
const (
	CabYellow uint8 = 0
	CabGreen  uint8 = 1
)

// CabTypeName names a cab type for output.
func CabTypeName(v uint8) string {
	switch v {
	case CabYellow:
		return "yellow"
	case CabGreen:
		return "green"
	case NullU8:
		return "NULL"
	}
	return fmt.Sprintf("cab-%d", v)
}

// Batch holds rows of every column in memory, column by column, as the
// bytes stored in the table's arrays.
type Batch struct {
	N   int
	Raw [NumCols][]byte
}

// NewBatch allocates a batch of n rows (all zero).
func NewBatch(n int) *Batch {
	b := &Batch{N: n}
	for c := range NumCols {
		b.Raw[c] = make([]byte, n*Schema[c].Type.Size())
	}
	return b
}

func view[T any](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// U8 returns a uint8 column's values.
func (b *Batch) U8(c Col) []uint8 { return b.Raw[c] }

// I8 returns an int8 column's values.
func (b *Batch) I8(c Col) []int8 { return view[int8](b.Raw[c]) }

// U16 returns a uint16 column's values.
func (b *Batch) U16(c Col) []uint16 { return view[uint16](b.Raw[c]) }

// U32 returns a uint32 column's values.
func (b *Batch) U32(c Col) []uint32 { return view[uint32](b.Raw[c]) }

// F32 returns a float32 column's values.
func (b *Batch) F32(c Col) []float32 { return view[float32](b.Raw[c]) }

// SetNull stores the NULL of column c at row i.
func (b *Batch) SetNull(c Col, i int) {
	switch Schema[c].Type {
	case Uint8:
		b.Raw[c][i] = NullU8
	case Int8:
		b.I8(c)[i] = NullPassenger
	case Uint16:
		b.U16(c)[i] = NullU16
	case Uint32:
		b.U32(c)[i] = NullTime
	case Float32:
		b.F32(c)[i] = NullF32
	}
}
