package taxi

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// QueryID names a query.
type QueryID string

// The queries. Q0–Q5 are BaM's selective family; B1–B4 are the four
// "billion taxi rides" queries.
const (
	Q0 QueryID = "q0"
	Q1 QueryID = "q1"
	Q2 QueryID = "q2"
	Q3 QueryID = "q3"
	Q4 QueryID = "q4"
	Q5 QueryID = "q5"
	B1 QueryID = "b1"
	B2 QueryID = "b2"
	B3 QueryID = "b3"
	B4 QueryID = "b4"
)

// AllQueries lists every query in order.
var AllQueries = []QueryID{Q0, Q1, Q2, Q3, Q4, Q5, B1, B2, B3, B4}

// amountCols are the columns Q1..Q5 add up, in order: Qk adds the first k.
var amountCols = []Col{FareAmount, Extra, MTATax, TollsAmount, ImprovementSurcharge}

// Query is a query with its parameter.
type Query struct {
	ID QueryID
	// Threshold is the trip distance D of Q0–Q5, in miles: finite and
	// positive.
	Threshold float64
}

// ParseQueryID accepts q0..q5 and b1..b4 in any case.
func ParseQueryID(s string) (QueryID, error) {
	id := QueryID(strings.ToLower(s))
	if slices.Contains(AllQueries, id) {
		return id, nil
	}
	return "", fmt.Errorf("%w: query %q (want q0..q5 or b1..b4)", ErrInvalid, s)
}

// Selective reports whether the query is one of Q0–Q5.
func (q Query) Selective() bool { return len(q.ID) == 2 && q.ID[0] == 'q' }

// Amounts returns the dependent columns Q0–Q5 read for matching rows.
func (q Query) Amounts() []Col {
	if !q.Selective() {
		return nil
	}
	return amountCols[:int(q.ID[1]-'0')]
}

// groupMask returns the group-by fields of B1–B4 and the averaged column.
func (q Query) groupMask() (mask uint8, avg bool) {
	switch q.ID {
	case B1:
		return groupCab, false
	case B2:
		return groupPassengers, true
	case B3:
		return groupPassengers | groupYear, false
	case B4:
		return groupPassengers | groupYear | groupDistance, false
	}
	return 0, false
}

// Columns lists the columns the query reads: for Q0–Q5 the scanned
// distance column first, then the dependent columns.
func (q Query) Columns() []Col {
	if q.Selective() {
		return append([]Col{TripDistance}, q.Amounts()...)
	}
	mask, avg := q.groupMask()
	var cols []Col
	if mask&groupCab != 0 {
		cols = append(cols, CabType)
	}
	if mask&groupPassengers != 0 {
		cols = append(cols, PassengerCount)
	}
	if mask&groupYear != 0 {
		cols = append(cols, PickupTime)
	}
	if mask&groupDistance != 0 {
		cols = append(cols, TripDistance)
	}
	if avg {
		cols = append(cols, TotalAmount)
	}
	return cols
}

// Validate checks the query's parameters.
func (q Query) Validate() error {
	if !slices.Contains(AllQueries, q.ID) {
		return fmt.Errorf("%w: query %q", ErrInvalid, q.ID)
	}
	if q.Selective() && (!(q.Threshold > 0) || math.IsInf(q.Threshold, 0)) {
		return fmt.Errorf("%w: %s: distance threshold %v must be finite and positive", ErrInvalid, q.ID, q.Threshold)
	}
	return nil
}

// String describes the query.
func (q Query) String() string {
	switch q.ID {
	case Q0:
		return fmt.Sprintf("Q0: count of trips with trip_distance >= %g", q.Threshold)
	case B1:
		return "B1: count by cab_type"
	case B2:
		return "B2: average total_amount by passenger_count"
	case B3:
		return "B3: count by passenger_count, pickup year"
	case B4:
		return "B4: count by passenger_count, pickup year, round(trip_distance)"
	}
	names := make([]string, 0, 5)
	for _, c := range q.Amounts() {
		names = append(names, Schema[c].Name)
	}
	return fmt.Sprintf("%s: sum(%s) / sum(trip_distance) over trips with trip_distance >= %g",
		strings.ToUpper(string(q.ID)), strings.Join(names, " + "), q.Threshold)
}

// Group-by fields.
const (
	groupCab uint8 = 1 << iota
	groupPassengers
	groupYear
	groupDistance
)

// Group key packing, shared with kernels/analytics.cu: bits 0–31 the
// rounded distance as an int32 (DistNull for NULL), bits 32–47 the pickup
// year minus 1899 (0 for NULL), bits 48–55 the passenger count's byte (0xFF
// for NULL), bits 56–63 the cab type. Fields a query does not group by are
// zero. No key equals EmptyKey, the hash table's empty slot, because the
// year field never reaches 0xFFFF.
const (
	DistNull = math.MinInt32
	EmptyKey = ^uint64(0)
)

// roundDistance rounds d half away from zero (SQL round) and clamps it to
// the int32 range above DistNull; NaN gives DistNull.
func roundDistance(d float32) int32 {
	if d != d {
		return DistNull
	}
	r := math.Round(float64(d))
	return int32(max(min(r, math.MaxInt32), math.MinInt32+1))
}

// yearField returns the year of pickup time p (UTC) minus 1899, or 0 for
// the NULL time.
func yearField(p uint32) uint64 {
	if p == NullTime {
		return 0
	}
	return uint64(time.Unix(int64(p), 0).UTC().Year() - 1899)
}

func groupKey(mask uint8, cab uint8, pc int8, pickup uint32, dist float32) uint64 {
	var k uint64
	if mask&groupCab != 0 {
		k |= uint64(cab) << 56
	}
	if mask&groupPassengers != 0 {
		k |= uint64(uint8(pc)) << 48
	}
	if mask&groupYear != 0 {
		k |= yearField(pickup) << 32
	}
	if mask&groupDistance != 0 {
		k |= uint64(uint32(roundDistance(dist)))
	}
	return k
}

// Agg is the running aggregate of one group.
type Agg struct {
	Count   uint64  // rows
	NonNull uint64  // rows whose averaged value is not NULL
	Sum     float64 // sum of the non-NULL averaged values
}

// Group is one output row of B1–B4. Fields the query does not group by
// are left at their NULL value and marked absent in Has.
type Group struct {
	CabType    int   `json:"cab_type,omitempty"`        // 255 = NULL
	Passengers int   `json:"passenger_count,omitempty"` // -1 = NULL
	Year       int   `json:"year,omitempty"`            // 0 = NULL
	Distance   int64 `json:"distance,omitempty"`        // DistNull = NULL
	Count      uint64
	// Avg is avg(total_amount) over the group's non-NULL totals (B2);
	// NaN when all of them are NULL.
	Avg  float64 `json:"-"`
	mask uint8
}

func makeGroup(mask uint8, key uint64, a Agg, avg bool) Group {
	g := Group{mask: mask, Count: a.Count, Avg: math.NaN()}
	g.CabType = int(key >> 56)
	g.Passengers = int(int8(uint8(key >> 48)))
	if y := int(key>>32) & 0xFFFF; y != 0 {
		g.Year = y + 1899
	}
	g.Distance = int64(int32(uint32(key)))
	if avg && a.NonNull > 0 {
		g.Avg = a.Sum / float64(a.NonNull)
	}
	return g
}

// groupsFromMap turns aggregates into groups sorted by key fields.
func groupsFromMap(q Query, m map[uint64]Agg) []Group {
	mask, avg := q.groupMask()
	out := make([]Group, 0, len(m))
	for k, a := range m {
		out = append(out, makeGroup(mask, k, a, avg))
	}
	slices.SortFunc(out, compareGroups)
	return out
}

// Result is a query's answer and what running it cost.
type Result struct {
	Query     QueryID `json:"query"`
	Text      string  `json:"text"`
	Threshold float64 `json:"threshold,omitempty"`
	Engine    string  `json:"engine"`

	// Q0–Q5.
	Count       uint64  `json:"count"`
	SumDistance float64 `json:"sum_distance,omitempty"`
	SumAmount   float64 `json:"sum_amount,omitempty"`
	// Value is SumAmount / SumDistance for Q1–Q5 (NaN with no matching
	// trip) and the count for Q0.
	Value float64 `json:"-"`

	// B1–B4.
	Groups []Group `json:"-"`

	Seconds     float64 `json:"seconds"`
	BytesRead   uint64  `json:"bytes_read"`
	BytesNeeded uint64  `json:"bytes_needed"`
}

// Amplification is bytes read per byte needed (0 when unknown).
func (r *Result) Amplification() float64 {
	if r.BytesNeeded == 0 || r.BytesRead == 0 {
		return 0
	}
	return float64(r.BytesRead) / float64(r.BytesNeeded)
}

// bytesNeeded is what the query must read at the finest grain: every row
// of its scanned columns and, for Q1–Q5, the matching rows of the
// dependent columns.
func bytesNeeded(q Query, rows, matches uint64) uint64 {
	if q.Selective() {
		n := rows * 4
		for _, c := range q.Amounts() {
			n += matches * uint64(Schema[c].Type.Size())
		}
		return n
	}
	var n uint64
	for _, c := range q.Columns() {
		n += rows * uint64(Schema[c].Type.Size())
	}
	return n
}

// finishSelective fills Value from the sums.
func (r *Result) finishSelective(q Query) {
	switch {
	case q.ID == Q0:
		r.Value = float64(r.Count)
	case r.Count == 0 || r.SumDistance == 0:
		r.Value = math.NaN()
	default:
		r.Value = r.SumAmount / r.SumDistance
	}
}

// rowAmount is the dependent sum of Q1–Q5 for one row: NULL amounts add 0.
func rowAmount(vals []float32) float64 {
	var s float64
	for _, v := range vals {
		if v == v {
			s += float64(v)
		}
	}
	return s
}

// Finish completes a result computed outside this package (another
// engine): it sorts the groups as the engines here do, sets Value from the
// sums and BytesNeeded from the row count, and BytesRead to BytesNeeded
// when unset.
func Finish(q Query, r *Result, rows uint64) {
	slices.SortFunc(r.Groups, compareGroups)
	if q.Selective() {
		r.finishSelective(q)
	}
	r.BytesNeeded = bytesNeeded(q, rows, r.Count)
	if r.BytesRead == 0 {
		r.BytesRead = r.BytesNeeded
	}
}

func compareGroups(a, b Group) int {
	return cmp.Or(cmp.Compare(a.CabType, b.CabType), cmp.Compare(a.Passengers, b.Passengers),
		cmp.Compare(a.Year, b.Year), cmp.Compare(a.Distance, b.Distance))
}
