// bayesblis latency backend for BLIS (`blis run|replay --latency-model bayesblis
// --bayesblis-coeffs FILE`).
//
// Part of the bayesblis project (integrations/blis/, Apache-2.0), not of BLIS: copy it to
// sim/latency/ of a BLIS checkout and apply bayesblis.patch (see integrations/blis/README.md).
//
// It prices a step exactly as bayesblis's own simulator does (bayesblis/features/beta.py,
// bayesblis/simulate/engine.py `_features`): the step's batch aggregates (prefill tokens,
// their context and attention pairs, prefill and decode requests, decode context) go
// through the per-deployment affine feature map the coefficient file holds (weights,
// bias, the MoE expert-traffic term, the measured all-reduce curve), the compute features keep only their excess over
// the memory time (one roofline per kernel group: dense GEMMs, an MoE model's fused-MoE kernels, attention), and the step time is features . beta, times
// max(0.05, 1 + sigma * StudentT(nu)) when the file asks for per-step noise. No model
// physics lives here: `bayesblis coefficients ... --format bayesblis-go` writes every
// constant.
//
// What BLIS's four-method LatencyModel interface cannot say, and how this file says it
// anyway (stateful, from the calls BLIS makes; docs/blis.md of bayesblis measures it):
//
//   - Async scheduling (vLLM's default): a request queued while a step runs joins the
//     step after the next one. BLIS admits it into the next one. QueueingTime adds the
//     wait, from the clock the priced steps give: a request queued inside the last priced
//     step is queued 1 µs after that step ends (so it misses the step that starts then);
//     one queued inside the step that starts then is queued 2 µs after that step ends,
//     its length predicted from the requests BLIS will batch (the last step's requests
//     and those queued by then, FCFS, within max_num_batched_tokens and max_num_seqs;
//     its noise is drawn ahead). An engine going idle adds no wait.
//   - The API server's return of a token behind the requests decoding then
//     (alpha_frontend_s x decoding): BLIS calls OutputTokenProcessingTime once per
//     generated token of a step, in batch order, right after StepTime (first tokens
//     included), and PostDecodeFixedOverhead once per request finishing that step, in
//     batch order. StepTime queues the values of those calls: alpha_output for a decode
//     token, alpha_frontend x decoding for a first token, and for a finishing request
//     alpha_output + alpha_frontend x (decoding now - decoding at its first token), so
//     that BLIS's TTFT and E2E become bayesblis's (TTFT = first token + frontend x
//     decoding; E2E = finish + alpha_output x output + frontend x decoding).
//   - Prefix-cache hits: BLIS prices a newly admitted request with ProgressIndex 0 even
//     when its group's prefix blocks are cached; a prefill chunk that starts at 0, whose
//     new tokens are exactly the prompt less the prefix's full blocks, is priced with that
//     prefix as its context (as bayesblis does).
package latency

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"

	"github.com/inference-sim/inference-sim/sim"
)

// BayesblisCoefficientsPath is the coefficient file `--bayesblis-coeffs` names.
var BayesblisCoefficientsPath string

// BayesblisFormat is the `format` a coefficient file must declare.
const BayesblisFormat = "bayesblis-go"

var bayesblisAggregates = []string{"prefill_tokens", "prefill_context_tokens",
	"prefill_attention_pairs", "num_prefill_reqs", "num_decode_reqs",
	"decode_context_tokens", "offload_blocks"}

// bayesblisFile is the JSON written by bayesblis (bayesblis/blis_export.py).
type bayesblisFile struct {
	Format          string      `json:"format"`
	FormatVersion   int         `json:"format_version"`
	Config          string      `json:"config"`
	Aggregates      []string    `json:"aggregates"`
	BetaFeatures    []string    `json:"beta_features"`
	AlphaFeatures   []string    `json:"alpha_features"`
	Weights         [][]float64 `json:"weights"` // [aggregate][feature], s per unit
	Bias            []float64   `json:"bias"`    // [feature], s per step
	MoECoeffS       float64     `json:"moe_coeff_s"`
	NExperts        float64     `json:"n_experts"`
	ExpertsPerTok   float64     `json:"experts_per_tok"`
	RoutedComputeS  float64     `json:"routed_compute_s_per_token"` // routed experts' FLOP time per token (their own roofline)
	CUDAGraphMaxTok float64     `json:"cuda_graph_max_tokens"`      // steps up to this many tokens route their CUDA-graph padded batch (0: none)
	AttentionComp   []float64   `json:"attention_compute_s"`        // [aggregate]: attention's FLOP time per unit (its own roofline)
	WeightIndex     int         `json:"weight_traffic_index"`
	TPCommIndex     int         `json:"tp_comm_index"`
	ARTokens        []float64   `json:"allreduce_tokens"` // measured all-reduce curve: step tokens (increasing)
	ARStepS         []float64   `json:"allreduce_step_s"` // and the step's all-reduce seconds at them
	ComputeIndices  [2]int      `json:"compute_indices"`
	MemoryIndices   [2]int      `json:"memory_indices"`
	RooflineMFU     float64     `json:"roofline_mfu"`
	BlockSize       int64       `json:"block_size"`
	AsyncScheduling bool        `json:"async_scheduling"`
	APIReturnDelay  *bool       `json:"api_return_delay"`       // default true: emulate alpha_frontend_s (see above)
	MaxBatchTokens  int64       `json:"max_num_batched_tokens"` // engine's token budget (0: none); predicts the next step
	MaxNumSeqs      int         `json:"max_num_seqs"`           // engine's running requests (0: no cap)
	Beta            []float64   `json:"beta"`                   // BETA_FEATURES order
	AlphaUs         []float64   `json:"alpha_us"`               // const, per prompt token, per output token, per request decoding
	NoiseSigma      float64     `json:"noise_sigma"`
	NoiseNu         float64     `json:"noise_nu"`
	NoiseSeed       int64       `json:"noise_seed"`
}

// BayesblisModel implements sim.LatencyModel with bayesblis's step and request model.
type BayesblisModel struct {
	f    bayesblisFile
	nAgg int
	nF   int
	rng  *rand.Rand
	feat []float64

	// rounding carry: BLIS ticks are whole µs; totals keep the fractions
	stepCarry float64
	otptCarry float64

	// async scheduling: the last priced step
	lastStart, lastEnd int64
	lastIdle           bool // every request of the last step finished with it and none waits
	seenAny            bool
	queuedAt           map[*sim.Request]int64 // queued time QueueingTime gave, until first scheduled
	seen               map[*sim.Request]bool  // scheduled at least once
	last               []slot                 // the last step's requests after it, batch order
	cachedGroups       map[string]bool        // prefix groups some request computed past their prefix
	nextEps            float64                // noise factor of the next step (drawn ahead)

	// API return delay: values of the calls BLIS makes after StepTime, in its order
	otptQueue    []float64
	postQueue    []float64
	decodingAtFT map[*sim.Request]float64
}

// slot: a request of the last step, as it stands after it.
type slot struct {
	progress, input int64
	finishing       bool
}

// NewBayesblisModel reads a bayesblis-go coefficient file.
func NewBayesblisModel(path string) (*BayesblisModel, error) {
	if path == "" {
		return nil, fmt.Errorf("bayesblis latency model: no coefficient file (--bayesblis-coeffs FILE, written by `bayesblis coefficients ... --format bayesblis-go`)")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bayesblis latency model: %w", err)
	}
	var f bayesblisFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("bayesblis latency model: %s: %w", path, err)
	}
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("bayesblis latency model: %s: %w", path, err)
	}
	if f.APIReturnDelay == nil {
		on := true
		f.APIReturnDelay = &on
	}
	m := &BayesblisModel{f: f, nAgg: len(f.Aggregates), nF: len(f.BetaFeatures),
		rng:          rand.New(rand.NewSource(f.NoiseSeed)),
		feat:         make([]float64, len(f.BetaFeatures)),
		queuedAt:     map[*sim.Request]int64{},
		seen:         map[*sim.Request]bool{},
		decodingAtFT: map[*sim.Request]float64{},
		cachedGroups: map[string]bool{},
		lastIdle:     true}
	m.nextEps = m.drawEps()
	return m, nil
}

func (f *bayesblisFile) validate() error {
	if f.Format != BayesblisFormat {
		return fmt.Errorf("format %q, expected %q", f.Format, BayesblisFormat)
	}
	if f.FormatVersion != 4 {
		return fmt.Errorf("format_version %d, expected 4", f.FormatVersion)
	}
	if len(f.Aggregates) != len(bayesblisAggregates) {
		return fmt.Errorf("aggregates %v, expected %v", f.Aggregates, bayesblisAggregates)
	}
	for i, a := range bayesblisAggregates {
		if f.Aggregates[i] != a {
			return fmt.Errorf("aggregates %v, expected %v", f.Aggregates, bayesblisAggregates)
		}
	}
	nF := len(f.BetaFeatures)
	if nF == 0 || len(f.Bias) != nF || len(f.Beta) != nF || len(f.Weights) != len(f.Aggregates) {
		return fmt.Errorf("shapes: %d features, bias %d, beta %d, weights %d rows (expected %d)",
			nF, len(f.Bias), len(f.Beta), len(f.Weights), len(f.Aggregates))
	}
	for i, row := range f.Weights {
		if len(row) != nF {
			return fmt.Errorf("weights row %d has %d entries, expected %d", i, len(row), nF)
		}
	}
	if len(f.AlphaUs) != 4 {
		return fmt.Errorf("alpha_us has %d entries, expected 4 (%v)", len(f.AlphaUs), f.AlphaFeatures)
	}
	if len(f.AttentionComp) != len(f.Aggregates) {
		return fmt.Errorf("attention_compute_s has %d entries, expected %d", len(f.AttentionComp), len(f.Aggregates))
	}
	if len(f.ARTokens) != len(f.ARStepS) {
		return fmt.Errorf("allreduce_tokens has %d entries, allreduce_step_s %d", len(f.ARTokens), len(f.ARStepS))
	}
	for i := 1; i < len(f.ARTokens); i++ {
		if !(f.ARTokens[i] > f.ARTokens[i-1]) {
			return fmt.Errorf("allreduce_tokens not increasing at entry %d", i)
		}
	}
	for _, idx := range []int{f.WeightIndex, f.TPCommIndex, f.ComputeIndices[0], f.ComputeIndices[1], f.MemoryIndices[0], f.MemoryIndices[1]} {
		if idx < 0 || idx >= nF {
			return fmt.Errorf("feature index %d out of range [0, %d)", idx, nF)
		}
	}
	if f.BlockSize < 1 {
		return fmt.Errorf("block_size %d, expected >= 1", f.BlockSize)
	}
	all := append(append(append([]float64{}, f.Beta...), f.AlphaUs...), f.Bias...)
	for _, v := range append(append(append(all, f.ARStepS...), f.AttentionComp...), f.NoiseSigma, f.MoECoeffS, f.RoutedComputeS) {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("coefficient %v is not a finite non-negative number", v)
		}
	}
	if f.NoiseSigma > 0 && !(f.NoiseNu > 0) {
		return fmt.Errorf("noise_nu %v, expected > 0 with noise_sigma > 0", f.NoiseNu)
	}
	return nil
}

// cudaGraphTokens is the step's tokens padded up to vLLM's next CUDA-graph size (1, 2, 4,
// multiples of 8 to 256, of 16 to maxTokens); larger steps and maxTokens 0 run unpadded
// (bayesblis features.beta.cuda_graph_tokens).
func cudaGraphTokens(tokens, maxTokens float64) float64 {
	switch {
	case maxTokens <= 0 || tokens > maxTokens:
		return tokens
	case tokens <= 2:
		return math.Ceil(tokens)
	case tokens <= 4:
		return 4
	case tokens <= 256:
		return math.Ceil(tokens/8) * 8
	}
	return math.Ceil(tokens/16) * 16
}

// StepSeconds is the noise-free step time (s) of one step's aggregates (exported for tests).
func (m *BayesblisModel) StepSeconds(agg []float64) float64 {
	f := &m.f
	for j := 0; j < m.nF; j++ {
		v := f.Bias[j]
		for a := 0; a < m.nAgg; a++ {
			v += agg[a] * f.Weights[a][j]
		}
		m.feat[j] = v
	}
	routedMem := 0.0 // the routed experts' bytes the step reads (s)
	if f.NExperts > 0 {
		miss := 1.0 - f.ExpertsPerTok/f.NExperts
		routedMem = f.MoECoeffS * f.NExperts * (1.0 - math.Pow(miss, cudaGraphTokens(agg[0]+agg[4], f.CUDAGraphMaxTok)))
		m.feat[f.WeightIndex] += routedMem
	}
	if n := len(f.ARTokens); n > 0 { // measured all-reduces, linear between the points (numpy interp)
		t := agg[0] + agg[4]
		switch {
		case t <= f.ARTokens[0]:
			m.feat[f.TPCommIndex] += f.ARStepS[0]
		case t >= f.ARTokens[n-1]:
			m.feat[f.TPCommIndex] += f.ARStepS[n-1]
		default:
			j := sort.SearchFloat64s(f.ARTokens, t)
			x0, x1 := f.ARTokens[j-1], f.ARTokens[j]
			m.feat[f.TPCommIndex] += f.ARStepS[j-1] + (f.ARStepS[j]-f.ARStepS[j-1])*(t-x0)/(x1-x0)
		}
	}
	// one roofline per kernel group: the dense GEMMs' FLOPs beyond their weights, the
	// fused-MoE kernels' routed FLOPs beyond the experts' bytes, attention's beyond the KV
	ip, id := f.ComputeIndices[0], f.ComputeIndices[1]
	compute := m.feat[ip] + m.feat[id]
	if compute > 0 {
		routed := f.RoutedComputeS * (agg[0] + agg[4])
		attention := 0.0
		for a := 0; a < m.nAgg; a++ {
			attention += agg[a] * f.AttentionComp[a]
		}
		weights, kv := m.feat[f.MemoryIndices[0]], m.feat[f.MemoryIndices[1]]
		excess := math.Max(compute-attention-routed-f.RooflineMFU*(weights-routedMem), 0) +
			math.Max(routed-f.RooflineMFU*routedMem, 0) +
			math.Max(attention-f.RooflineMFU*kv, 0)
		share := excess / compute
		m.feat[ip] *= share
		m.feat[id] *= share
	}
	s := 0.0
	for j := 0; j < m.nF; j++ {
		s += m.feat[j] * f.Beta[j]
	}
	return s
}

// studentT draws from Student's t with nu degrees of freedom.
func (m *BayesblisModel) studentT(nu float64) float64 {
	z := m.rng.NormFloat64()
	chi2 := 2 * gammaDraw(m.rng, nu/2)
	return z / math.Sqrt(chi2/nu)
}

// gammaDraw: Gamma(shape, 1) by Marsaglia and Tsang (shape < 1 boosted).
func gammaDraw(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gammaDraw(r, shape+1) * math.Pow(r.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// drawEps: one step's noise factor max(0.05, 1 + sigma t_nu) (1 without noise).
func (m *BayesblisModel) drawEps() float64 {
	if m.f.NoiseSigma <= 0 {
		return 1
	}
	eps := 1 + m.f.NoiseSigma*m.studentT(m.f.NoiseNu)
	if eps < 0.05 {
		eps = 0.05
	}
	return eps
}

// cachedPrefix: the full blocks of a request's group prefix once the group is cached.
func (m *BayesblisModel) cachedPrefix(req *sim.Request) int64 {
	if req.PrefixGroup == "" || req.PrefixLength <= 0 || !m.cachedGroups[req.PrefixGroup] {
		return 0
	}
	return int64(req.PrefixLength) / m.f.BlockSize * m.f.BlockSize
}

// predictNext: the duration (µs, with its noise) of the step that starts when the last
// one ends: the last step's requests go on (decodes, prefill chunks, in their order) and
// the requests queued by then are admitted FCFS, within the token budget and max_num_seqs.
func (m *BayesblisModel) predictNext() float64 {
	agg := make([]float64, m.nAgg)
	budget := m.f.MaxBatchTokens
	if budget <= 0 {
		budget = math.MaxInt64
	}
	seqs := 0
	for _, sl := range m.last {
		if sl.finishing || budget <= 0 {
			continue
		}
		seqs++
		if sl.progress < sl.input {
			n := min(sl.input-sl.progress, budget)
			c := float64(sl.progress)
			agg[0] += float64(n)
			agg[1] += c
			agg[2] += float64(n)*c + float64(n)*float64(n+1)/2
			agg[3]++
			budget -= n
		} else {
			agg[4]++
			agg[5] += float64(sl.progress)
			budget--
		}
	}
	type pending struct {
		q   int64
		req *sim.Request
	}
	var waiting []pending
	for req, q := range m.queuedAt {
		if q <= m.lastEnd {
			waiting = append(waiting, pending{q, req})
		}
	}
	for i := 1; i < len(waiting); i++ { // FCFS (few entries: insertion sort)
		for j := i; j > 0 && (waiting[j].q < waiting[j-1].q ||
			(waiting[j].q == waiting[j-1].q && waiting[j].req.ID < waiting[j-1].req.ID)); j-- {
			waiting[j], waiting[j-1] = waiting[j-1], waiting[j]
		}
	}
	for _, p := range waiting {
		if budget <= 0 || (m.f.MaxNumSeqs > 0 && seqs >= m.f.MaxNumSeqs) {
			break
		}
		c := m.cachedPrefix(p.req)
		n := min(p.req.InputLen()-c, budget)
		agg[0] += float64(n)
		agg[1] += float64(c)
		agg[2] += float64(n)*float64(c) + float64(n)*float64(n+1)/2
		agg[3]++
		budget -= n
		seqs++
	}
	return m.StepSeconds(agg) * 1e6 * m.nextEps
}

// prefillContext: tokens already in the KV cache before this prefill chunk.
func (m *BayesblisModel) prefillContext(req *sim.Request) float64 {
	if req.ProgressIndex == 0 && req.PrefixLength > 0 {
		cached := int64(req.PrefixLength) / m.f.BlockSize * m.f.BlockSize
		if cached > 0 && req.InputLen()-int64(req.NumNewTokens) == cached {
			return float64(cached)
		}
	}
	return float64(req.ProgressIndex)
}

// roundCarry turns x µs into whole ticks, carrying the fraction into the next call.
func roundCarry(x float64, carry *float64) int64 {
	total := x + *carry
	ticks := math.Floor(total + 0.5)
	*carry = total - ticks
	return int64(ticks)
}

func (m *BayesblisModel) StepTime(batch []*sim.Request) int64 {
	alpha := m.f.AlphaUs
	m.otptQueue = m.otptQueue[:0]
	m.postQueue = m.postQueue[:0]
	agg := make([]float64, m.nAgg)
	var newestQueued int64 = math.MinInt64
	decoding := 0.0
	for _, req := range batch {
		if req.NumNewTokens <= 0 {
			continue
		}
		if req.ProgressIndex >= req.InputLen() && len(req.OutputTokens) > 0 {
			decoding++
		}
	}
	allFinish := true
	m.last = m.last[:0]
	for _, req := range batch {
		if !m.seen[req] {
			m.seen[req] = true
			if q, ok := m.queuedAt[req]; ok {
				if q > newestQueued {
					newestQueued = q
				}
				delete(m.queuedAt, req)
			}
		}
		n := float64(req.NumNewTokens)
		if req.NumNewTokens <= 0 {
			continue
		}
		out := int64(len(req.OutputTokens))
		var after int64
		if req.ProgressIndex < req.InputLen() {
			ctx := m.prefillContext(req)
			agg[0] += n
			agg[1] += ctx
			agg[2] += n*ctx + n*(n+1)/2
			agg[3]++
			after = int64(ctx) + int64(req.NumNewTokens)
			if after == req.InputLen() { // first token this step
				m.otptQueue = append(m.otptQueue, alpha[3]*decoding)
				m.decodingAtFT[req] = decoding
			}
		} else if out > 0 {
			agg[4]++
			agg[5] += float64(req.ProgressIndex)
			after = req.ProgressIndex + 1
			m.otptQueue = append(m.otptQueue, alpha[2])
		}
		if out < 1 {
			out = 1
		}
		if req.PrefixGroup != "" && req.PrefixLength > 0 && after >= int64(req.PrefixLength) {
			m.cachedGroups[req.PrefixGroup] = true
		}
		finishing := after >= req.InputLen()+out-1 && after >= req.InputLen()
		m.last = append(m.last, slot{progress: after, input: req.InputLen(), finishing: finishing})
		if finishing {
			if len(req.OutputTokens) > 0 {
				m.postQueue = append(m.postQueue, alpha[2]+alpha[3]*(decoding-m.decodingAtFT[req]))
			}
			delete(m.decodingAtFT, req)
			delete(m.seen, req)
		} else {
			allFinish = false
		}
	}
	dur := m.StepSeconds(agg) * 1e6 * m.nextEps
	m.nextEps = m.drawEps()
	ticks := max(1, roundCarry(dur, &m.stepCarry))
	// this step starts when the last one ended or, on an idle engine, when the request
	// that woke it was queued
	start := max(m.lastEnd, newestQueued)
	m.seenAny = true
	m.lastStart, m.lastEnd = start, start+ticks
	waiting := false
	for _, q := range m.queuedAt {
		if q <= m.lastEnd {
			waiting = true
			break
		}
	}
	m.lastIdle = allFinish && !waiting
	return ticks
}

func (m *BayesblisModel) QueueingTime(req *sim.Request) int64 {
	a := m.f.AlphaUs
	delay := roundCarry(a[0]+a[1]*float64(req.InputLen()), new(float64))
	q := req.ArrivalTime + delay
	if m.f.AsyncScheduling && m.seenAny {
		switch {
		case q > m.lastStart && q <= m.lastEnd && !m.lastIdle:
			// queued while the last priced step runs: the step scheduled behind it is
			// already formed, so the request waits for the one after
			q = m.lastEnd + 1
		case q > m.lastEnd && !m.lastIdle:
			// the step starting when the last one ends will be in flight: queue the request
			// just after it ends (its duration predicted from the requests BLIS will batch)
			next := int64(math.Floor(m.predictNext() + 0.5))
			if q <= m.lastEnd+next {
				q = m.lastEnd + next + 2
			} else {
				q += next
			}
		}
	}
	m.queuedAt[req] = q
	return q - req.ArrivalTime
}

func (m *BayesblisModel) OutputTokenProcessingTime() int64 {
	v := m.f.AlphaUs[2]
	if *m.f.APIReturnDelay && len(m.otptQueue) > 0 {
		v = m.otptQueue[0]
		m.otptQueue = m.otptQueue[1:]
	}
	return roundCarry(v, &m.otptCarry)
}

func (m *BayesblisModel) PostDecodeFixedOverhead() int64 {
	if !*m.f.APIReturnDelay {
		return 0 // BLIS's own reading: alpha_output on every token, the first included
	}
	v := m.f.AlphaUs[2]
	if len(m.postQueue) > 0 {
		v = m.postQueue[0]
		m.postQueue = m.postQueue[1:]
	}
	return roundCarry(v, &m.otptCarry)
}
