package graph

// Progress reports long phases (generation, import, building, writing):
// Start begins a phase of total units and returns its Bar.
type Progress interface {
	Start(phase string, total int64) Bar
}

// Bar is one phase in progress. Add may be called from several goroutines.
type Bar interface {
	Add(n int64)
	Done()
}

type noProgress struct{}

func (noProgress) Start(string, int64) Bar { return noBar{} }

type noBar struct{}

func (noBar) Add(int64) {}
func (noBar) Done()     {}

func progressOr(p Progress) Progress {
	if p == nil {
		return noProgress{}
	}
	return p
}
