package costmodel

import (
	"errors"
	"math"
)

// ridgeFit solves min ‖Xβ − y‖² + λ‖β‖² by the normal equations; the
// feature count is a handful, so Gaussian elimination is plenty.
func ridgeFit(xs [][]float64, ys []float64, lambda float64) ([]float64, error) {
	if len(xs) == 0 {
		return nil, errors.New("no samples")
	}
	k := len(xs[0])
	a := make([][]float64, k)
	for i := range a {
		a[i] = make([]float64, k+1)
	}
	for n, x := range xs {
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				a[i][j] += x[i] * x[j]
			}
			a[i][k] += x[i] * ys[n]
		}
	}
	for i := 0; i < k; i++ {
		a[i][i] += lambda
	}
	for col := 0; col < k; col++ {
		piv := col
		for r := col + 1; r < k; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[piv][col]) {
				piv = r
			}
		}
		if math.Abs(a[piv][col]) < 1e-12 {
			return nil, errors.New("singular system")
		}
		a[col], a[piv] = a[piv], a[col]
		for r := 0; r < k; r++ {
			if r == col {
				continue
			}
			f := a[r][col] / a[col][col]
			for c := col; c <= k; c++ {
				a[r][c] -= f * a[col][c]
			}
		}
	}
	beta := make([]float64, k)
	for i := range beta {
		beta[i] = a[i][k] / a[i][i]
	}
	return beta, nil
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
