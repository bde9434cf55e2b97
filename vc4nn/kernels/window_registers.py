"""The sliding-window kernel's registers (vc4nn/kernels/window.py), written once: the plan
(window_plan.py) sizes its tiles by the counts, the generator uses the registers.

Regfile A (a multiply-add's accumulator pairs with its product's weight on regfile B):
- ra0..ra29: accumulators, ``acc_sets`` output rows x ``tile_cols`` columns (float32 and fp16
  storage alike: fp16 results are packed into the accumulator they come from, dead once staged),
  and as many again for the odd channels with channel pairs;
- ra30: the bias (the first tap of an output starts from it, beside a weight on regfile B);
- ra31: fp16 storage, the input vector as read (only regfile A unpacks halves).

Regfile B:
- rb0..rb19: the window's weights (depthwise; channel pairs: the even channels', then the odd
  ones', and in rb19 the odd channels' bias) or the column scales (avg_pool);
- rb20, rb21: the two load buffers' generic read (and write) setups; rb22, rb23: their DMA load
  setups (the roles of the current iteration: swapped after an odd number of chunks);
- rb24: 6.0 (relu6); rb25..rb30: the QPU's VPM rows as read and as write setup offsets, the
  tile's load and store setup bases, the current input row and store address.

Split accumulators (``WindowPlan.split_accumulators``: a 3x3 depthwise window at stride 1, rolled
loops, one channel per lane), for strips of up to 14 columns: the newest output row (set 2), which
only the window's top row feeds, lives on regfile B beside the other sets' weights, and its three
weights on regfile A beside the other sets' accumulators, so each multiply-add still reads one
register of each file:
- ra0..ra27: sets 0 and 1 (2 x 14); ra28..ra30: the top row's weights; ra31 as above;
- rb0..rb5: the middle and bottom rows' weights; rb6..rb19: set 2 (14); rb31: the bias (only set
  2's first taps start from it, beside a weight on regfile A).

r5: the loop count (written as r5rep: every lane holds it), which a small immediate decrements
(an rb register would need the immediate's read port).

r0 scratch, r1 the input vector, r2/r3 products (alternating, so that the add of one product
issues with the multiply of the next).
"""

from asm import r5, r5rep, ra, rb

ACCUMULATOR_REGISTERS = 30
WEIGHT_REGISTERS = 20

ACC = [ra[i] for i in range(ACCUMULATOR_REGISTERS)]
BIAS = ra[ACCUMULATOR_REGISTERS]
HALF_INPUT = ra[ACCUMULATOR_REGISTERS + 1]
WEIGHTS = [rb[i] for i in range(WEIGHT_REGISTERS)]
# Channel pairs: the odd channels' bias. On regfile B it cannot start a sum beside a weight (one
# read port), so it is added once per output at the store instead (and leaves regfile A to the
# accumulators: 3 rows x 5 columns x 2 channels).
BIAS_HIGH = WEIGHTS[-1]
(BUFFER_ROW0, BUFFER_ROW1, BUFFER_LOAD0, BUFFER_LOAD1, SIX, VPM_ROW0, VPM_WRITE_ROW0, LOAD_BASE,
 STORE_BASE, ROW, STORE) = (rb[i] for i in range(WEIGHT_REGISTERS, 31))
COUNT, COUNT_WRITE = r5, r5rep

SPLIT_COLS = 14
SPLIT_ACC_A = [ra[i] for i in range(2 * SPLIT_COLS)]
SPLIT_TOP_WEIGHTS = [ra[i] for i in range(2 * SPLIT_COLS, 2 * SPLIT_COLS + 3)]
SPLIT_WEIGHTS_B = [rb[i] for i in range(6)]
SPLIT_ACC_B = [rb[i] for i in range(6, 6 + SPLIT_COLS)]
SPLIT_BIAS = rb[31]
BUFFER_ROWS = (BUFFER_ROW0, BUFFER_ROW1)
BUFFER_LOADS = (BUFFER_LOAD0, BUFFER_LOAD1)
