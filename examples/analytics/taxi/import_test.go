package taxi

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

// newRow is a trip in the 2019+ TLC yellow Parquet schema.
type newRow struct {
	VendorID    int32     `parquet:"VendorID"`
	Pickup      time.Time `parquet:"tpep_pickup_datetime,timestamp(microsecond)"`
	Dropoff     time.Time `parquet:"tpep_dropoff_datetime,timestamp(microsecond)"`
	Passengers  *float64  `parquet:"passenger_count,optional"`
	Distance    float64   `parquet:"trip_distance"`
	PU          int32     `parquet:"PULocationID"`
	DO          int32     `parquet:"DOLocationID"`
	Payment     int64     `parquet:"payment_type"`
	Fare        float64   `parquet:"fare_amount"`
	Extra       float64   `parquet:"extra"`
	MTA         float64   `parquet:"mta_tax"`
	Tip         float64   `parquet:"tip_amount"`
	Tolls       float64   `parquet:"tolls_amount"`
	Improvement float64   `parquet:"improvement_surcharge"`
	Total       *float64  `parquet:"total_amount,optional"`
	Congestion  *float64  `parquet:"congestion_surcharge,optional"`
	AirportFee  *float64  `parquet:"airport_fee,optional"`
}

// oldRow is a trip in the 2009–2010 schema: other names, strings for
// vendor and payment, no surcharges beyond "surcharge", no locations.
type oldRow struct {
	Vendor     string  `parquet:"vendor_id"`
	Pickup     string  `parquet:"pickup_datetime"`
	Dropoff    string  `parquet:"dropoff_datetime"`
	Passengers int64   `parquet:"passenger_count"`
	Distance   float64 `parquet:"trip_distance"`
	Payment    string  `parquet:"payment_type"`
	Fare       float64 `parquet:"fare_amount"`
	Surcharge  float64 `parquet:"surcharge"`
	MTA        float64 `parquet:"mta_tax"`
	Tip        float64 `parquet:"tip_amount"`
	Tolls      float64 `parquet:"tolls_amount"`
	Total      float64 `parquet:"total_amount"`
}

func writeParquet[T any](t *testing.T, path string, rows []T) {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf, parquet.MaxRowsPerRowGroup(3))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func f64(v float64) *float64 { return &v }

func TestImportParquetAndCSV(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t0 := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
	nan := math.NaN()
	newRows := []newRow{
		{1, t0, t0.Add(10 * time.Minute), f64(1), 35.5, 132, 230, 1, 90, 0.5, 0.5, 10, 6.55, 0.3, f64(110), f64(2.5), f64(1.25)},
		{2, t0, t0.Add(time.Minute), nil, 0, 1, 1, 2, 3, 0, 0.5, 0, 0, 0.3, f64(3.8), nil, nil},
		{2, t0, t0, f64(200), -3, 264, 265, 3, -5, 0, 0, 0, 0, 0, nil, nil, nil},
		{1, t0.AddDate(-2, 0, 0), t0, f64(2), 31, 7, 8, 1, 70, 1, 0.5, 0, 0, 0.3, f64(71.8), nil, nil},
		{1, t0, t0, f64(3), nan, 7, 8, 1, 70, 1, 0.5, 0, 0, 0.3, f64(71.8), nil, nil},
		{2, t0, t0, f64(0), 20, 7, 8, 4, nan, 1, 0.5, 0, 0, 0.3, f64(71.8), nil, nil},
	}
	writeParquet(t, filepath.Join(dir, "yellow_tripdata_2021-03.parquet"), newRows)
	oldRows := []oldRow{
		{"CMT", "2009-01-01 10:00:00", "2009-01-01 10:30:00", 1, 40, "CASH", 80, 0.5, 0, 0, 4.15, 84.65},
		{"VTS", "2009-06-01 00:00:00", "2009-06-01 00:10:00", 5, 2.5, "Credit", 8, 0, 0, 2, 0, 10},
	}
	writeParquet(t, filepath.Join(dir, "yellow_tripdata_2009-01.parquet"), oldRows)
	csvText := "VendorID,lpep_pickup_datetime,lpep_dropoff_datetime,passenger_count,trip_distance,fare_amount,extra,mta_tax,tip_amount,tolls_amount,improvement_surcharge,total_amount,payment_type,unknown_column\n" +
		"2,2020-01-01 00:00:00,2020-01-01 00:50:00,1,45,120,1,0.5,0,0,0.3,121.8,1,x\n" +
		"2,2020-01-01 00:00:00,2020-01-01 00:05:00,,1,6,,0.5,0,0,0.3,,2,y\n"
	if err := os.WriteFile(filepath.Join(dir, "green_tripdata_2020-01.csv"), []byte(csvText), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, 512)
	files := []string{
		filepath.Join(dir, "yellow_tripdata_2021-03.parquet"),
		filepath.Join(dir, "yellow_tripdata_2009-01.parquet"),
		filepath.Join(dir, "green_tripdata_2020-01.csv"),
	}
	tb, err := Import(ctx, s, "tlc", files, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tb.Rows != 10 {
		t.Fatalf("rows %d, want 10", tb.Rows)
	}
	tb, err = Open(s, "tlc")
	if err != nil {
		t.Fatal(err)
	}
	b, err := tb.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The documented rules, row by row.
	pc := b.I8(PassengerCount)
	if pc[0] != 1 || pc[1] != NullPassenger || pc[2] != NullPassenger || pc[5] != 0 || pc[6] != 1 || pc[9] != NullPassenger {
		t.Errorf("passenger_count %v", pc)
	}
	if d := b.F32(TripDistance); d[1] != 0 || d[2] != -3 || !math.IsNaN(float64(d[4])) || d[6] != 40 {
		t.Errorf("trip_distance %v", d)
	}
	if v := b.F32(ImprovementSurcharge); !math.IsNaN(float64(v[6])) || v[0] != float32(0.3) {
		t.Errorf("improvement_surcharge %v (missing in the 2009 file: NULL)", v)
	}
	if v := b.F32(Extra); v[6] != 0.5 || !math.IsNaN(float64(v[9])) {
		t.Errorf("extra %v (2009 surcharge maps to extra; empty CSV field is NULL)", v)
	}
	if v := b.U16(PULocationID); v[0] != 132 || v[6] != NullU16 {
		t.Errorf("pu_location_id %v", v)
	}
	if v := b.U8(VendorID); v[6] != 1 || v[7] != 2 || v[8] != 2 {
		t.Errorf("vendor_id %v", v)
	}
	if v := b.U8(PaymentType); v[6] != 2 || v[7] != 1 {
		t.Errorf("payment_type %v", v)
	}
	if v := b.U8(CabType); v[0] != CabYellow || v[6] != CabYellow || v[8] != CabGreen {
		t.Errorf("cab_type %v", v)
	}
	if v := b.U32(PickupTime); v[0] != uint32(t0.Unix()) || v[6] != uint32(time.Date(2009, 1, 1, 10, 0, 0, 0, time.UTC).Unix()) {
		t.Errorf("pickup %v", v)
	}
	for _, q := range allQueries(0.5, 20, 30) {
		r, err := RunCPU(ctx, tb, q, 2)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, q, b, r)
	}
	// Q1 at 30 miles by hand: rows 0 (35.5, fare 90), 3 (31, 70), 6 (40, 80), 8 (45, 120).
	r, err := RunCPU(ctx, tb, Query{ID: Q1, Threshold: 30}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := (90.0 + 70 + 80 + 120) / (35.5 + 31 + 40 + 45); r.Count != 4 || math.Abs(r.Value-want) > 1e-9 {
		t.Errorf("Q1(30) = %d trips, %v; want 4, %v", r.Count, r.Value, want)
	}
}

func TestImportMalformed(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := filepath.Join(dir, "good.parquet")
	writeParquet(t, good, []oldRow{{"CMT", "2009-01-01 10:00:00", "2009-01-01 10:30:00", 1, 40, "CASH", 80, 0.5, 0, 0, 4.15, 84.65}})
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, path, want string }{
		{"not parquet", write("x.parquet", "hello, world"), "x.parquet"},
		{"truncated parquet", write("t.parquet", string(raw[:len(raw)-10])), "t.parquet"},
		{"cut in the middle", write("m.parquet", string(raw[:len(raw)/2])+string(raw[len(raw)-8:])), "m.parquet"},
		{"empty csv", write("e.csv", ""), "empty file"},
		{"csv without distance", write("n.csv", "fare_amount\n1\n"), "no trip_distance"},
		{"csv bad number", write("b.csv", "trip_distance,fare_amount\n1,abc\n"), "line 2, column fare_amount"},
		{"csv bad time", write("c.csv", "trip_distance,tpep_pickup_datetime\n1,yesterday\n"), "yesterday"},
		{"csv short row", write("s.csv", "trip_distance,fare_amount\n1\n"), "s.csv"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if strings.HasSuffix(c.path, ".csv") {
				_, err = ReadCSVFile(c.path, CabYellow)
			} else {
				_, err = ReadParquetFile(c.path, CabYellow)
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want ErrFormat mentioning %q", err, c.want)
			}
		})
	}
	s := newStore(t, 512)
	if _, err := Import(context.Background(), s, "x", []string{write("a.txt", "")}, ImportOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown extension: %v", err)
	}
	if _, err := Open(s, "x"); err == nil {
		t.Error("a failed import left a table")
	}
}

func FuzzReadCSV(f *testing.F) {
	f.Add("trip_distance,fare_amount,tpep_pickup_datetime,passenger_count\n1.5,7,2020-01-01 00:00:00,2\n")
	f.Add("trip_distance\n\n")
	f.Add("a,b\n1,2\n")
	f.Fuzz(func(t *testing.T, text string) {
		b, err := ReadCSV(strings.NewReader(text), "fuzz", CabYellow)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		for c := range NumCols {
			if len(b.Raw[c]) != b.N*Schema[c].Type.Size() {
				t.Fatalf("column %s: %d bytes for %d rows", Schema[c].Name, len(b.Raw[c]), b.N)
			}
		}
	})
}

func FuzzReadParquet(f *testing.F) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[oldRow](&buf)
	w.Write([]oldRow{{"CMT", "2009-01-01 10:00:00", "2009-01-01 10:30:00", 1, 40, "CASH", 80, 0.5, 0, 0, 4.15, 84.65}})
	w.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := ReadParquet(bytes.NewReader(data), int64(len(data)), "fuzz", CabYellow)
		if err != nil && !errors.Is(err, ErrFormat) {
			t.Fatalf("error %v does not wrap ErrFormat", err)
		}
	})
}
