// Package taxi keeps NYC-taxi-like trip tables in a bam store, column by
// column, and runs BaM's selective analytics queries and the four "billion
// taxi rides" queries over them on the CPU engine, the GPU engine and, as a
// baseline, over columns in host memory.
//
// # Tables
//
// A table called NAME is one array per column, NAME.<column>, with the
// element types of Schema, and a descriptor object NAME whose catalog
// metadata records the kind, format version, schema and row count. The
// descriptor is written last, after the columns are flushed, so a table
// that Open finds is complete.
//
// Columns and their NULL encodings:
//
//	vendor_id, payment_type, cab_type  uint8    0xFF is NULL
//	pickup_datetime, dropoff_datetime  uint32   seconds since 1970 UTC; 0 is NULL
//	passenger_count                    int8     -1 is NULL
//	pu_location_id, do_location_id     uint16   0xFFFF is NULL
//	trip_distance and the amounts      float32  NaN is NULL
//
// Importers (Parquet files as published by the NYC TLC, and CSV with a
// header line) map the published column names of every year through
// Schema's aliases, case-insensitively. A column missing from a file (older
// yellow-trip files lack improvement_surcharge, congestion_surcharge and the
// location ids) is NULL in every row of that file; a value that does not
// fit its column (a passenger count outside 0..127, a time before 1970 or
// after 2106, an id outside the column's range) is stored as NULL; zero
// and negative distances and amounts are kept as they are. Malformed files
// (not Parquet, truncated, unparsable numbers, a CSV row with the wrong
// number of fields, no trip_distance column) fail with an error wrapping
// ErrFormat that names the file and, where known, the row and column.
//
// The generator (Generate, GenerateBatch) is deterministic in (seed, row):
// rows are drawn from a random stream per GenChunk rows, so any number of
// workers writes the same table. Its trip distances follow the figures of
// the BaM evaluation: 0.5 % zero, 0.47 % at least 20 miles and 0.03 % at
// least 30 miles; rows are in random order (no clustering by distance).
//
// # Queries
//
// Q0–Q5 scan trip_distance and, only for matching rows (trip_distance >= D,
// D finite and positive; NaN, zero and negative distances never match),
// read up to five dependent columns:
//
//	Q0  count(*)
//	Q1  sum(fare_amount) / sum(trip_distance)
//	Q2  sum(fare_amount + extra) / sum(trip_distance)
//	Q3  sum(fare_amount + extra + mta_tax) / sum(trip_distance)
//	Q4  sum(fare_amount + extra + mta_tax + tolls_amount) / sum(trip_distance)
//	Q5  sum(fare_amount + extra + mta_tax + tolls_amount + improvement_surcharge) / sum(trip_distance)
//
// over the matching trips: dollars per mile over those trips. A NULL amount
// adds 0 to its row's sum. With no matching trip Q1–Q5 are NULL (NaN).
// Sums are accumulated in float64, so engines agree to rounding, not bit
// for bit.
//
// The "billion taxi rides" queries group with SQL semantics, NULL being a
// group of its own:
//
//	B1  SELECT cab_type, count(*) GROUP BY cab_type
//	B2  SELECT passenger_count, avg(total_amount) GROUP BY passenger_count
//	B3  SELECT passenger_count, year(pickup_datetime), count(*) GROUP BY 1, 2
//	B4  SELECT passenger_count, year(pickup_datetime), round(trip_distance), count(*) GROUP BY 1, 2, 3
//
// avg ignores NULL totals (NULL when a group has none); years are UTC;
// round is half away from zero, clamped to the int32 range.
//
// A Result reports the time, the bytes the engine read from storage, the
// bytes the query needs at element grain (all rows of the scanned columns,
// the matching rows of the dependent ones) and their ratio, the I/O
// amplification. With lines of L bytes, 4-byte values and selectivity s,
// each dependent column costs about 1-(1-s)^(L/4) of its lines: 26 % at
// 4 KiB, 7.4 % at 1 KiB and 3.8 % at 512 B for s = 0.03 %. On the GPU the
// scanned columns need the opposite, large lines (fewer commands), so they
// sit in a second cache of GPUConfig.ScanLineSize bytes (by default the
// store's line size) while the dependent columns keep Engine.LineSize.
//
// # Invariants
//
//   - A published table's columns all have the descriptor's row count and
//     the schema's element types (Open checks).
//   - The CPU engine path reads only through bam.Data (ranges and gathers);
//     the GPU path binds the column arrays to a gpuengine.Engine over the
//     store's namespace files and reads through bam::array in
//     kernels/analytics.cu.
//
// The package must not write below the store's public API.
package taxi
