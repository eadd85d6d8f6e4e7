package low

func sumB(xs []int) int {
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

func tableB() []int {
	return []int{
		1,
		2,
		3,
		4,
		5,
		6,
	}
}

func tableC() []int {
	return []int{
		1,
		2,
		3,
		4,
		5,
		6,
	}
}
