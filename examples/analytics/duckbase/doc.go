// Package duckbase is baseline (b) of benchmark A1: the taxi queries run by
// DuckDB (github.com/marcboeker/go-duckdb, its static library linked into
// the binary) on the host's cores, over the same columns the GPU engine
// reads.
//
// Load hands the columns of a taxi.Batch to DuckDB as Arrow record batches
// (no copy on the Go side) and materialises them as an in-memory DuckDB
// table, so the timed queries see DuckDB's own columnar format, as a DuckDB
// user's queries would. Run issues the SQL of each query (package taxi's
// definitions) and returns a taxi.Result.
//
// NULL encodings: package taxi stores NULL floats as NaN, which DuckDB
// orders above every number, so a table with NaN distances or amounts
// would not answer as taxi defines; Load refuses such columns (generated
// tables have none). The integer NULL encodings (-1 passengers, 0 times)
// are passed as values and decoded in SQL.
//
// The package must not touch the store: it sees only host memory.
package duckbase
