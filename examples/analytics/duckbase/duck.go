package duckbase

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/bam-go/bam/examples/analytics/taxi"
	"github.com/marcboeker/go-duckdb"
)

// recordRows is the number of rows per Arrow record batch handed to DuckDB.
const recordRows = 1 << 20

// DB is an in-memory DuckDB database holding one taxi table.
type DB struct {
	db   *sql.DB
	conn *sql.Conn
	rows uint64
}

func arrowType(t taxi.Type) arrow.DataType {
	switch t {
	case taxi.Uint8:
		return arrow.PrimitiveTypes.Uint8
	case taxi.Int8:
		return arrow.PrimitiveTypes.Int8
	case taxi.Uint16:
		return arrow.PrimitiveTypes.Uint16
	case taxi.Uint32:
		return arrow.PrimitiveTypes.Uint32
	}
	return arrow.PrimitiveTypes.Float32
}

// Load creates a DuckDB database using threads threads and copies the
// given columns of b into its table "trips".
func Load(ctx context.Context, b *taxi.Batch, cols []taxi.Col, threads int) (_ *DB, err error) {
	for _, c := range cols {
		if taxi.Schema[c].Type == taxi.Float32 && slices.ContainsFunc(b.F32(c), func(v float32) bool { return v != v }) {
			return nil, fmt.Errorf("duckbase: column %s holds NULLs (NaN), which DuckDB would not treat as NULL", taxi.Schema[c].Name)
		}
	}
	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		return nil, fmt.Errorf("duckbase: %w", err)
	}
	d := &DB{db: sql.OpenDB(connector), rows: uint64(b.N)}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	d.db.SetMaxOpenConns(1)
	if d.conn, err = d.db.Conn(ctx); err != nil {
		return nil, fmt.Errorf("duckbase: %w", err)
	}
	for _, s := range []string{fmt.Sprintf("SET threads TO %d", threads)} {
		if _, err := d.conn.ExecContext(ctx, s); err != nil {
			return nil, fmt.Errorf("duckbase: %s: %w", s, err)
		}
	}
	fields := make([]arrow.Field, len(cols))
	for k, c := range cols {
		fields[k] = arrow.Field{Name: taxi.Schema[c].Name, Type: arrowType(taxi.Schema[c].Type)}
	}
	schema := arrow.NewSchema(fields, nil)
	var recs []arrow.Record
	for lo := 0; lo < b.N; lo += recordRows {
		hi := min(b.N, lo+recordRows)
		arrs := make([]arrow.Array, len(cols))
		for k, c := range cols {
			sz := taxi.Schema[c].Type.Size()
			buf := memory.NewBufferBytes(b.Raw[c][lo*sz : hi*sz])
			data := array.NewData(fields[k].Type, hi-lo, []*memory.Buffer{nil, buf}, nil, 0, 0)
			arrs[k] = array.MakeFromData(data)
			data.Release()
		}
		recs = append(recs, array.NewRecord(schema, arrs, int64(hi-lo)))
		for _, a := range arrs {
			a.Release()
		}
	}
	reader, err := array.NewRecordReader(schema, recs)
	if err != nil {
		return nil, fmt.Errorf("duckbase: %w", err)
	}
	defer reader.Release()
	for _, r := range recs {
		r.Release()
	}
	err = d.conn.Raw(func(dc any) error {
		ar, err := duckdb.NewArrowFromConn(dc.(driver.Conn))
		if err != nil {
			return err
		}
		release, err := ar.RegisterView(reader, "trips_arrow")
		if err != nil {
			return err
		}
		defer release()
		_, err = dc.(driver.ExecerContext).ExecContext(ctx, "CREATE TABLE trips AS SELECT * FROM trips_arrow", nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("duckbase: load: %w", err)
	}
	return d, nil
}

// Close closes the database.
func (d *DB) Close() error {
	var errs []error
	if d.conn != nil {
		errs = append(errs, d.conn.Close())
	}
	return errors.Join(append(errs, d.db.Close())...)
}

const yearSQL = "CASE WHEN pickup_datetime = 0 THEN NULL ELSE year(epoch_ms(pickup_datetime::BIGINT * 1000)) END"

// SQL returns the statement that answers q over table trips.
func SQL(q taxi.Query) string {
	pc := "CASE WHEN passenger_count < 0 THEN NULL ELSE passenger_count END"
	switch q.ID {
	case taxi.B1:
		return "SELECT cab_type, count(*) FROM trips GROUP BY 1"
	case taxi.B2:
		return "SELECT " + pc + ", avg(total_amount::DOUBLE), count(*) FROM trips GROUP BY 1"
	case taxi.B3:
		return "SELECT " + pc + ", " + yearSQL + ", count(*) FROM trips GROUP BY 1, 2"
	case taxi.B4:
		return "SELECT " + pc + ", " + yearSQL + ", round(trip_distance::DOUBLE)::BIGINT, count(*) FROM trips GROUP BY 1, 2, 3"
	}
	sum := "0::DOUBLE"
	for _, c := range q.Amounts() {
		sum += " + " + taxi.Schema[c].Name + "::DOUBLE"
	}
	return fmt.Sprintf("SELECT count(*), coalesce(sum(trip_distance::DOUBLE), 0), coalesce(sum(%s), 0) FROM trips WHERE trip_distance >= %v",
		sum, q.Threshold)
}

// Run runs q and returns its result; Seconds is the query's wall time.
func (d *DB) Run(ctx context.Context, q taxi.Query) (*taxi.Result, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	r := &taxi.Result{Query: q.ID, Text: q.String(), Threshold: q.Threshold, Engine: "duckdb"}
	start := time.Now()
	rows, err := d.conn.QueryContext(ctx, SQL(q))
	if err != nil {
		return nil, fmt.Errorf("duckbase: %s: %w", q.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		if q.Selective() {
			if err := rows.Scan(&r.Count, &r.SumDistance, &r.SumAmount); err != nil {
				return nil, fmt.Errorf("duckbase: %s: %w", q.ID, err)
			}
			continue
		}
		g := taxi.Group{Passengers: -1, Distance: taxi.DistNull, Avg: math.NaN()}
		var pc, year, dist sql.NullInt64
		var avg sql.NullFloat64
		var cab uint8
		var err error
		switch q.ID {
		case taxi.B1:
			err = rows.Scan(&cab, &g.Count)
			g.CabType, g.Passengers, g.Distance = int(cab), 0, 0
		case taxi.B2:
			err = rows.Scan(&pc, &avg, &g.Count)
		case taxi.B3:
			err = rows.Scan(&pc, &year, &g.Count)
		case taxi.B4:
			err = rows.Scan(&pc, &year, &dist, &g.Count)
		}
		if err != nil {
			return nil, fmt.Errorf("duckbase: %s: %w", q.ID, err)
		}
		if pc.Valid {
			g.Passengers = int(pc.Int64)
		}
		if year.Valid {
			g.Year = int(year.Int64)
		}
		if q.ID != taxi.B4 && q.ID != taxi.B1 {
			g.Distance = 0
		}
		if dist.Valid {
			g.Distance = dist.Int64
		}
		if avg.Valid {
			g.Avg = avg.Float64
		}
		r.Groups = append(r.Groups, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("duckbase: %s: %w", q.ID, err)
	}
	r.Seconds = time.Since(start).Seconds()
	taxi.Finish(q, r, d.rows)
	return r, nil
}

// Version is the DuckDB library version the binary links.
const Version = "v1.1.3 (go-duckdb v1.8.5)"
