package low

func sumA(xs []int) int {
	total := 0
	for _, x := range xs {
		if x > Limit {
			total += x
		}
		total *= 2
	}
	total -= Limit
	return total
}

var tableA = []int{
	1,
	2,
	3,
	4,
	5,
	6,
}
