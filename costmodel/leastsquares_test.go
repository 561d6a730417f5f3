package costmodel

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRidgeFitRecoversCoefficients(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	truth := []float64{0.05, 0.4, 1.2}
	var xs [][]float64
	var ys []float64
	for i := 0; i < 500; i++ {
		x := []float64{1, r.Float64() * 10, r.Float64() * 3}
		xs = append(xs, x)
		ys = append(ys, dot(truth, x)+r.NormFloat64()*0.01)
	}
	beta, err := ridgeFit(xs, ys, 1e-9)
	require.NoError(t, err)
	for i := range truth {
		assert.InDelta(t, truth[i], beta[i], 0.01)
	}
	_, err = ridgeFit(nil, nil, 0)
	assert.Error(t, err)
	_, err = ridgeFit([][]float64{{0, 0}, {0, 0}}, []float64{1, 2}, 0)
	assert.Error(t, err)
}
