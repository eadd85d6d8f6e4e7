package low

// T has two exported fields, one unexported and an embedded exported one.
type T struct {
	A, B int
	c    int
	Emb
}

// Emb is embedded.
type Emb struct{}

// M is an exported method; m is not.
func (T) M() {}
func (T) m() {}

// Limit is a constant.
const Limit = 3

func Double(v int) int { return 2 * v }
func Inc(v int) int    { return v + 1 }
func Ignored(int)      {}
