package top

func other() int { return 1 }

func user() int { return back() }
