package top

func helper(v int) int { return v + other() }

func back() int { return Start(&Req{}, 0) }
