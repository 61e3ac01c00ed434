"""Regional edge generation: ExecuTorch's edge generation run once per distinct layer structure,
the whole edge program assembled from the results, installed only while lowerd lowers.

`_gen_edge_manager_for_partitioners` (three `run_decompositions` replays, the partitioners'
`ops_to_not_decompose`, then `_generate_edge_program`'s passes) runs over the whole exported
program, so its cost grows with the model's depth although an LLM's layers are one structure
repeated. While `RegionalEdge.installed()` is open, a drop-in runs it instead on each distinct
region cut out as its own program (region_cut.py: a layer is one ModuleList element's contiguous
nodes, the rest is one region) and assembles the whole edge program from those templates
(region_assembly.py). When a gate below does not hold it calls ExecuTorch's own function, and logs
why at debug level (`stock edge generation: ...`); when it assembles, it logs `regional edge
generation: R regions from T templates`.

Why the assembled program is the one ExecuTorch makes (torch 2.13.0, executorch 1.5.1, XNNPACK's
partitioner), field by field:
- Nodes, targets, arguments. For an XNNPACK-only method, edge generation is the functionalizing
  replay, `ops_to_not_decompose` + the EDGE_DO_NOT_DECOMP replacement + two decomposition replays,
  then `_generate_edge_program`'s passes. A replay re-traces the graph node by node (make_fx):
  what a node becomes depends on its target, arguments and their values, and functionalization
  is per node when no input is mutated but a buffer one layer alone uses (below) and no region
  reads a tensor another region wrote in place, or a view of one (gate): functionalization applies
  an in-place update lazily and emits a view of the tensor written again at its next reader,
  with the reader's metadata. OPT's mask is `copy_` into a clone in the rest, read by each
  layer as `alias(copy_)`; stock emits that alias at the layer's SDPA (its from_node root, so
  its debug handle, which XNNPACK writes into the blob, is the SDPA's), a layer cut out alone
  at its own node: the blobs differed by one debug handle per layer from there on. XNNPACK
  keeps an op (linear, elu, hardswish, max_pool2d, upsample, prelu) after a per-node check that
  reads the node, its arguments' values, whether its weight and bias are parameters of the
  program (the cut keeps every parameter a parameter) and its q/dq neighbours (torchao's,
  below; no other op outside aten: gate).
  The passes (view -> view_copy, assert removal, ReplaceSymSizeOp, NormalizeTranspose,
  ReplaceBrokenOps, ScalarToTensor, SymToTensor, RemoveNoop, PruneEmptyTensors, RemoveToCopy,
  FoldRedundantDQ/Q, RemoveMixedTypeOperators, OpReplace, MemoryFormatOps) rewrite one node from
  its own target, arguments and values. What is not per node is redone by the assembly: dead
  code (gate: a layer's every node is used, or is an assert the passes remove), unused
  parameters (dropped), lifted constants (below), names and debug handles (below). So a region's
  edge nodes are a function of its `structure` (region_cut.py: ops, argument structure and
  values, value metadata, which inputs are parameters/buffers/activations, which nodes are used
  outside), and two regions of one structure get the same nodes with their own inputs. The rest
  (embeddings, masks with their higher-order ops and vmap's stateful calls, head) is generated
  alone as one cut in its own order; layers between its parts hold only aten ops, torchao's
  q/dq ops and custom_sdpa (gate), which touch no such state (neither is decomposed, below). A
  region's edge nodes that would leave its run, an output that is an input, a node of no
  region: NotLocal, and stock runs.
- torchao's affine q/dq ops (QDQ_OPS: choose_qparams_affine, quantize_affine,
  dequantize_affine; 8da4w/8da8w linears, optimum's recipe) are per node through the replays.
  They are functional CompositeImplicitAutograd ops: the functionalizing replay (an empty table)
  preserves every such op it is not told to decompose, so each is re-traced as itself, its value
  from its fake kernel on its own arguments. XNNPACK's partitioner names all three in
  `ops_to_not_decompose` (QDQAffineConfigs' original aten), so the first decomposition table
  lacks them; their configs' check is `True` for every node, so the EDGE_DO_NOT_DECOMP
  replacement retargets each one, the second replay (the full table) keeps it and the restore
  puts its target back (`_remove_invalid_ops_for_not_decompose` keeps all three, by op: the
  schema checks, choose_qparams_affine by its allow-list). So a q/dq node is never decomposed
  and comes out as its own target on its own arguments. The passes see it as any node: OpReplace
  makes its edge op from its target; ScalarToTensorPass coerces a scalar only where its own
  schema wants a tensor (none of these do: quant_min/max are Scalars), any constant lifted being
  numbered by the assembly as below; the others do not match it. What is not per node is the
  check that decides a linear's fate in the EDGE_DO_NOT_DECOMP loop: LinearConfig's, which walks
  the linear's q/dq chain back (the activation's dequantize, its quantize, the getitems of its
  choose_qparams; the weight's dequantize, its input and its scale and zero point) and reads
  their targets, arguments, values (`_get_block_size_input_scale`: the weight's and scale's)
  and whether the weight is a parameter of the program it is given. Gate: a q/dq node, and a
  getitem of one, has its users and its q/dq inputs in its own region (a chain ending in another
  layer's linear, a dequantized weight two layers share: stock); the cut then holds the whole
  chain, weights and scales as the program's parameters/buffers (a constant input is NotLocal,
  a get_attr gated). The chain's float input may come from another region (the head's chain
  reads the last layer's output): the walk stops at choose_qparams, and a read of that input's
  value reads its placeholder's, the same `val`. The loop retargets nodes in node order as it
  checks, so a linear sees its chain already retargeted; the chain precedes it in its region,
  whose order the cut keeps: the same state. XNNPACK's DQ/Q neighbour checks that make
  partitions (GEMMConfig's deps, the dq-inputs/q-output pattern, `is_dynamic_qdq`, the 8da4w
  dynamic-quant partitions) run in to_backend, on the assembled whole program as on stock's:
  no region sees them. lowerd's own memos (intx_memo.py, qparam_memo.py) act before export, on
  the model's weights, and give the program stock's tensors bit for bit: the regional path
  starts from the same exported program, cold or rebuilt from the cache.
- ExecuTorch's `llama.custom_sdpa` (optimum's recipe's attention, registered by importing
  executorch.extension.llm.custom_ops; CUSTOM_OPS) is per node through the replays: a functional
  CompositeExplicitAutograd op (no alias or write in its schema), in no decomposition table (the
  default one holds aten's decompositions and CompositeImplicitAutograd ops), so each replay
  re-traces it as itself, its value from its Meta kernel on its own arguments. XNNPACK's
  partitioner has no config for it: no `ops_to_not_decompose` entry, no check reads it, and its
  partition step (on the assembled program, as stock's) leaves it outside the delegates. The
  passes: OpReplace makes its edge op from its target; ScalarToTensorPass coerces nothing (its
  scalars, start_pos, dropout and scale, are SymInt and floats in its schema, not tensors); the
  others do not match it. Gate: start_pos is a constant int or an unbacked symbol its layer's
  `.item()` binds (below; a backed symbol is not argued). The other llama ops are gated but one:
- `llama.update_cache(value, cache(a!), start_pos)` (ExecuTorch's KV cache's write; CUSTOM_OPS)
  is an in-place op on a buffer, and is argued as aten's in-place writes are (`written` reads
  the `a!` of its schema): only on a buffer (not a view of one) that its layer alone writes and
  uses (`_why_buffer_write`), so its cut holds the cache as its own buffer input with every
  read and write, and the template's functionalizing replay makes the write and its
  BUFFER_MUTATION output as stock's does. Like custom_sdpa it is in no decomposition table, its
  value (a one-element tensor) from its Meta kernel on its own arguments, XNNPACK has no config
  for it, and no pass but OpReplace matches it. Gate: start_pos as custom_sdpa's.
- Node names: fx names a node from its target's base and a per-graph counter; emitting the nodes
  in stock's order from each template name's base gives stock's names.
- `val`: the template's value remade (shape, stride, dtype, device) in one fake mode; its
  `requires_grad` is the template's, or, where an input carries grad and the template's value
  does not (a cut's activation inputs come in without it), what the op gives on the fake values.
  It reaches the .pte for values outside delegates; nothing else of a fake value does.
- `nn_module_stack`, `stack_trace`, `torch_fn`: the region's own aten node's value at the place
  the template's came from (a value mapping to two places' different values: NotLocal).
  lowerd's report, refusals and module coverage read them; they are stock's.
- `source_fn_stack` (strict export's [(fx name, module class or function)], on call_function
  nodes and, from the parameter's user in dynamo's graph, on weight placeholders): copied per
  node by the replays (fx.proxy's _COPY_META_FIELDS), as nn_module_stack; its fx names are
  unique per call, so they differ between layers. A region's `structure` holds its shape (names
  by first place in the region, callables by name: region_cut.source_fns), so names map one to
  one between two regions of one structure, and a copy takes the region's own node's value at
  the template's place. No pass, partitioner or emitter of these versions reads it (XNNPACK's
  get_source_fn is called nowhere; to_backend only pops it off the getitems after a delegate;
  serde writes it, but not into a .pte); partition_key.py keys it (the callables only, with
  stable naming), so its value must be stock's to keep a partition's key.
- A weight placeholder's `_COPY_META_FIELDS` (source_fn_stack, torch_fn, original_aten, ...):
  each replay sets them from the weight's last user in the graph
  (torch._export.utils._collect_param_buffer_metadata). A weight several regions read (tied
  weights) takes them from the template of the region holding its last user in the assembled
  graph (stock's order), whose cut has it as its last user too; the first reader's, as the
  assembly once gave, is stock's only when one region reads it.
- `example_value` (strict export, on weight placeholders only; the edge program's keeps it from
  the unlifted module's get_attr, the very object that is its `val`): the remade val, the same
  object (a template whose example_value is another object than its val: NotLocal). Readers:
  ExportPass mirrors it onto the sym_size nodes it makes (dynamic shapes only: gated), no
  partitioner or emitter; partition_key.py keys it as a tensor's description, the val's.
- `from_node`: a copy's node descends from its own region's aten node (a one-link chain to it,
  which holds that node's own chain), the template region's from the cut of its own: the root
  is the same aten node (or its ancestor) as in stock's chain. Two readers: the debug handles
  and lowerd's divergence search (verify), both by the root only. The chain's middle links
  (ids of intermediate graphs) differ between any two stock runs too.
- `debug_handle`: numbered by ExecuTorch's own DebugHandleGeneratorPass on the assembled graph,
  by each node's greatest ancestor, in stock's node order: stock's numbers.
- `tensor_meta`, `custom` and the placeholders' metadata: the template's (the same for every
  region of one structure; a layer's `custom` must be empty: gate), but a weight placeholder's
  `desc` (ParamAOTInput/BufferAOTInput, which the replays make from the input spec's target)
  names the region's own weight, as stock's does. partition_key.py keys `desc`: with the
  template's, a layer's partitions would change key whenever its template does (an edit
  elsewhere), and miss the cache.
  A user input's `desc`, PlainAOTInput(idx), is its place among the program's user inputs, as
  the replays number them (region_assembly._user_desc; the template's numbers its cut's).
- `seq_nr` (autograd's process-wide counter), `original_aten`, `eager_input_vals`, another
  placeholder's `desc`: the template's. No pass, partitioner or emitter of these versions reads
  them (edge_speedups.py), and partition_key.py keys a partition without the first.
- Placeholders: each replay unlifts the program and traces its weights in the unlifted
  module's named_parameters() then named_buffers() order, named from their targets
  (replay_inputs.py); a strict export's may be named by dynamo's access path and ordered
  otherwise (transformers' StaticCache: `b_static_cache_layers_0_keys`, target `key_cache_0`,
  after the rotary embedding's buffer), so the assembly places and names the weight
  placeholders as the replays do (names that would collide, whose suffixes it does not
  reproduce: NotLocal).
- Signature: the program's input specs for its placeholders, `BUFFER` specs for the constants
  ScalarToTensorPass lifted, numbered `_lifted_tensor_constant<buffers + i>` in order of first
  use and placed before the first user input, as lift_constant_tensor_pass makes them; the
  BUFFER_MUTATION specs (below), then the program's output specs on the assembled outputs. A
  constant input (CONSTANT_TENSOR) in a region: NotLocal.
- Buffers written in place (a KV cache: ExecuTorch's llama KVCache `k_cache[:, :, pos] = k`,
  transformers' StaticCache `index_copy_`; a step counter's `add_`). Export's IR (torch 2.13,
  strict or not) keeps the write as the in-place op on the buffer's placeholder, later reads
  take its result, and the signature has no output for it: the first replay makes one. Gate:
  the buffer is written directly (not through a view: functionalization writes a base back
  lazily, at its next read or at the graph's end, which for a layer cut out alone is the
  layer's end), by a layer, and it, its views and the writes' results are used in that layer
  alone (no other region, not the program's output). Field by field:
  nodes: a direct write of an input replaces the functional tensor's value at once, so the
  functional op (index_put for index_copy_) is emitted at the in-place op's place, the reads
  after it read it, and the sync at the graph's end emits nothing (no view update pending):
  per node, within the layer's run. The layer's cut holds the buffer as its own BUFFER input
  (the program's spec, persistence and tensor; `structure` keys the persistence) with the
  write and every read, and its replay makes the same nodes and a BUFFER_MUTATION output of
  that node, the write (it counts as used: the every-node-used gate spares it).
  Outputs: `_decompose_exported_program` puts the mutated inputs first, in the order of
  aot_export's `input_info` over its inputs (every placeholder, in the program's order), each
  a BUFFER_MUTATION spec with the buffer's target, then the user outputs. The assembly maps each
  template's BUFFER_MUTATION (of the template region's buffer) to the buffer at the same input
  place of the copy's region, and orders them by the buffers' placeholders, in the output node's
  args and the output specs; by the order of the writes the .pte differs (tested).
  The buffer's placeholder: the replays make it descend from the write (`from_node`; the
  `copy_` back into the buffer, replaced): a copy's is a one-link chain to its region's own
  write, as for its call_function nodes; its `desc` names its own buffer (below).
  state_dict and constants: a persistent buffer's entry in the first, a non-persistent one's
  in the second, the program's own tensors, as `_generate_edge_program` passes them on (the
  replays run on fake values and change neither).
- state_dict (used parameters and buffers plus the lifted constants), constants, range
  constraints, module call graph, example inputs: the program's, as `_generate_edge_program`
  passes them on. Verifier: EXIREdgeDialectVerifier with the ops the templates preserved, whose
  union is the one stock collects (each region's decisions are its template's).
- Constant methods (optimum's recipe adds a dozen: get_max_seq_len, use_kv_cache, ...):
  `_gen_edge_manager_for_partitioners` reads them nowhere but in handing them to the
  EdgeProgramManager it returns (its `_config_methods`, which to_backend passes on and the
  emitter writes as methods returning those values); the assembled program's manager is given
  the same object. A template's own stock run is given none: its manager is dropped, only its
  edge program is read.
- EdgeCompileConfig's `_check_ir_validity` and `_skip_dim_order` (optimum's recipe sets them
  False and True). Each template's stock run is given a copy of the config, so it is made with
  the same fields as stock's whole program. `_check_ir_validity` is read only when an
  EXIREdgeDialectVerifier is instantiated (its `enable`; off, every check returns at once): by
  the verifier `_generate_edge_program` attaches, by EdgeProgramManager's check and, after
  partitioning, by to_edge_transform_and_lower's own. A verifier checks and never rewrites; the
  assembled program's is made from the same config, so it raises where stock's would and keeps
  silent where stock's does. `_skip_dim_order` leaves MemoryFormatOpsPass out of
  `_generate_edge_program`: that pass rewrites one `_to_copy`/`clone`/`empty` node into its
  dim_order op from the node's own kwargs and input value, so per node, and each template is made
  with it left out as stock's program is. Its other readers are the verifier's `use_dim_order`
  (which op family a check refuses) and to_executorch's LegalizePortableDimOrderPass, which
  reads the manager's config: the assembled program's manager is given the same object.
  `preserve_ops` and a non-empty `_core_aten_ops_exception_list` are not argued (gate).
- Dynamic shapes with backed symbols (a sequence `Dim`, as every LLM flow users ship exports
  it: `s70` in [2, 63] for 1..max_seq_len - 1). The replays run in the program's own fake mode
  (run_decompositions detects it from the placeholders' values) and so in its one ShapeEnv,
  with its ranges; each template's cut keeps the program's values, so it runs in that same
  ShapeEnv, and its replays meet the guards stock's met. The symbol is bound once: the replays'
  insert_deferred_runtime_asserts puts `sym_size(input, d)` after the placeholders, at the first
  placeholder and size carrying it, and a replay's tracer keys a SymInt by its SymNode and keeps
  the first binding it meets. In stock's whole program every layer's view_copy, expand_copy and
  slice_copy then reads that one node of the rest (export's own `sym_size_int` node, which the
  layers take as an input, is rebound to it). A layer's cut takes that node as a SymInt user
  input placed before its activations (region_cut.cut_user_inputs): the tracer binds the symbol
  to it (the activations carry the same SymNode; first, they would bind it to a `sym_size` of
  the activation, a node stock does not have), so the template's nodes read the placeholder the
  assembly maps to the rest's binding. The rest's template makes the binding (checked: at the
  program's first placeholder and size carrying the symbol, as stock's) and the sym ops its
  decompositions compute (`s70 + 1` for the mask); their from_node roots are the replays' own
  nodes, in no region, one each as in stock (so their own debug handles), placed with their
  template neighbours' segment (both must agree). A layer template node descending from no
  node of its cut: NotLocal. `val`s are remade in the program's fake mode (the one stock's edge
  values live in), with the template's SymInt sizes and strides, which are the program's
  symbols, so `s70` everywhere as in stock's program; a SymInt `val` is the template's own.
  Names of symbols reach no byte: the emitter writes each tensor's upper-bound sizes, which
  to_executorch's ConstraintBasedSymShapeEvalPass computes from the ShapeEnv's ranges (the
  same), and its dynamism; the sym_size and sym ops stay outside the delegates (XNNPACK refuses
  a view with a SymInt size, in stock too) and become the emitter's sym ops from their targets.
  Range constraints are the program's, as stock passes them on (the cut carries them too).
  `structure` reads a symbolic size by its expression. SymFloat values: gate.
- Unbacked symbols (`u0` of an `.item()`: ExecuTorch's KVCache.update and SDPACustom read
  start_pos so, in each layer, optimum's recipe). Export binds each to its `item` node
  (`unbacked_bindings`) and leaves the ShapeEnv's facts on it (update_cache's meta checks:
  u0 >= 0, u0 <= 4, u0 < 8) as `_assert_scalar` nodes of symbolic comparisons. Gate: each
  symbol bound by a node as its value, held (in values and arguments) by nodes of the binding
  region alone, in no tensor's size or stride, a SymBool holding one at least. Every
  replay re-traces each `item` into a fresh symbol (renamed to export's by rebind_unbacked) and
  its meta checks and insert_deferred_runtime_asserts re-make the assertions from what the
  ShapeEnv knows of that symbol, which came of its own layer's nodes; so a layer's edge nodes
  follow from its own nodes and its symbols' ranges, both in `structure` (a symbol by its place
  among those the layer binds: u0 and u2 are one structure; an assertion's message likewise).
  Each template's run is in the program's ShapeEnv, as stock's; a run leaves symbols pending
  there that nothing binds (48 for the six `.item()`s of tests/test_region_llm.py's stack), on
  which the next trace raises (stock's own run twice on one program too), so each run here
  starts with none pending, as export leaves it.
  Copies: the replays' assertion nodes descend from no node of the cut (their roots are the
  replays' own), so they are placed with their neighbours in the template's order (the same
  layer) and each is its own root: its own debug handle, in stock's order (debug handles shift
  every later node's, and XNNPACK writes them into the blobs). A copy's symbols are made afresh,
  one per template symbol, with its range: stock's are distinct per `.item()` (its passes'
  fresh ones, its bindings' keys) and so are a copy's; an assertion's message names the copy's
  own symbol of export. What of these reaches the .pte: the `_local_scalar_dense` kernel calls
  (ops from targets) and an Int value each, the emitter's `_get_sym_ret` (0, whatever the
  symbol); to_executorch removes the assertions and their comparisons. Their names (stock's
  differ from run to run by the ShapeEnv's counter) and the node name a message quotes (the
  first replay's: `ge_3` in stock's, `ge_1` in a template's) reach no byte, no partition
  (XNNPACK takes no symbolic op) and so no partition key.
- Unbacked with backed symbols: a dynamic length and a per-layer start_pos (update_cache's
  check `start_pos + seq_len <= cache_len`, optimum's recipe and ExecuTorch's KV cache with a
  dynamic sequence): `s0 + u0 <= 64`, export's `add` of the rest's length binding and the
  layer's `item`, its `le` and `_assert_scalar`. The replays remake it as the others (the
  meta check defers it on the fresh symbol, insert_deferred_runtime_asserts emits it once every
  symbol it holds is bound: after the `item`, `s0` being bound before every node) and compute
  its expression with a sympy interpreter that reuses any node of the graph already holding a
  subexpression. Its atoms are `s0`, bound in stock's graph by the rest's `sym_size` of the
  program's first input carrying it, in a layer's cut by its SymInt input placed first (above),
  which the assembly maps to that binding; and `u0`, the layer's own. A subexpression holding
  no unbacked symbol of the layer (`2*s0`) could be another region's node in stock's graph and
  the template's own: gate, checked on the template (each operand of a replayed assertion node
  holds the layer's unbacked symbol, or is a bare symbol's cut input, or a constant; its ops
  add, sub, mul and the comparisons, others in a layer: stock). So a layer's `add`, `le` and
  assertion are per layer, their roots the replays' own (each its own debug handle, placed
  after their neighbours as above), reading the copy's own `_local_scalar_dense` and the rest's
  binding; their vals are the copy's fresh symbol with `s0` kept (the program's symbol, as in
  stock's), their messages export's `s0 + u<k>` of the copy's region. The rest's binding of an
  input size, which the replays put right after the placeholders, is emitted first (the first
  segment must be the rest's: NotLocal otherwise), whatever its template neighbours. The ShapeEnv
  is shared: a template's run that changed a backed symbol's range or replacement (an assertion
  that refines `s0`) would leave the later regions in a state stock's run reaches at one layer
  only: NotLocal (checked after each run). With none changed, each layer's facts are on its own
  fresh symbols, as stock's. The assembled program's range constraints are remade from that
  ShapeEnv by stock's function (region_assembly.assembled_program): the backed symbols' and
  export's unbacked ones' entries are stock's (`s0: [2, N]`, not export's `[1, N]`); the
  replays' fresh unbacked symbols are numbered by the ShapeEnv's counter, which fewer replays
  leave lower than stock's: those entries differ (no byte reads them: the emitter does not; a
  partition's key holds only its own graph's symbols, partition_key._encode_own_ranges, and no
  tensor's size holds an unbacked symbol: gate).
- More than one method (prefill/decode; a multimodal program's text_decoder, token_embedding):
  stock's loop makes each method's edge program from that method's aten program and
  partitioners alone; what it shares is the config, read only as the fields above (and
  `preserve_ops`, only for a method without partitioners: gate) and written only after the
  loop, when every method's preserved ops join its exception list (each method's verifier was
  made from the list as it was before). So each method is generated on its own: by region where
  its gates hold, with its own templates; otherwise by ExecuTorch's function called on that
  method alone with a copy of the config. The manager is made from the methods in stock's order
  with the union of their preserved ops, after which the config's list gains that union. When no
  method goes by region, the call is stock's as a whole.

Gates (each checked; any other case runs ExecuTorch's own function):
- the validated versions (edge_speedups.validated_versions);
- no etrecord, no transform passes but region_passes.py's allow-list (they run on the edge
  program this returns, and may read any field), an XNNPACK partitioner for every method;
- only XNNPACK partitioners (lowerd's observed wrapper seen through), an EdgeCompileConfig whose
  other fields than `_check_ir_validity` and `_skip_dim_order` are the default;
- inputs only user inputs, parameters and buffers, outputs only user outputs (export's IR
  keeps a buffer's write as its in-place op, with no output), weights plain tensors; symbolic
  values only SymInt sizes of backed symbols, unbacked SymInts and their assertions' SymInts
  and SymBools each bound and used in one region (above; no SymFloat, no SymBool of backed
  symbols alone), no template run changing a backed symbol's range;
- every op in aten, QDQ_OPS or CUSTOM_OPS (or getitem, or in the rest a higher-order op), every
  q/dq chain in one region, custom_sdpa's and update_cache's start_pos a constant or an
  unbacked symbol (above); an in-place op only on a tensor its own region made and only its
  region reads (export's IR keeps in-place ops until the first replay functionalizes them), or
  directly on a buffer (not a view of one) that one layer writes and alone uses; and no tensor
  written in place, its bases or views (an in-place op's result among them) read in another
  region;
- in a layer: no get_attr input, no call but an aten op, getitem or a runtime assertion's symbolic
  comparison or add/sub/mul (holding an unbacked symbol), every node used (or an assert, or a
  buffer's write), only the node metadata keys the argument covers (strict export's source_fn_stack,
  `unbacked_bindings` among them), no `custom` annotation; the same of each layer template's edge
  program (its placeholders may carry example_value: checked after it is made: NotLocal);
- regions contiguous, and at least two layers of one structure (otherwise no gain).
tests/test_region_layers.py compares the bytes with the stock script's for a Llama edited at the
first, a middle and the last layer, with scaled weights and an op XNNPACK refuses;
tests/test_region_flows.py for per-layer caches written in place, a stack quantized 8da4w as
optimum's recipe does, attention layers calling custom_sdpa and a Llama with a dynamic sequence
length; tests/test_region_edge.py for tiny stacks with optimum's constant methods,
EdgeCompileConfig and transform pass, with three methods, for a strict export whose layers read
one tied weight (metadata as stock's), and checks that the gates fall back (a q/dq chain across
layers, a torchao op and a llama op not argued; a buffer read by another layer, written by two,
written in the rest, written through a view; an unbacked symbol in a tensor's size).
tests/test_region_architectures.py compares the bytes and the path across transformers
architectures (tests/architectures.py: OPT, GPT-2, Phi, Qwen2, Gemma, BERT), and Llama and GPT-2
exported strict under no_grad (bytes and the replays' metadata as stock's);
tests/test_region_store.py transformers' static cache exported strict (its weights renamed and
reordered by the replays); tests/test_region_llm.py layers updating their own KV caches with
llama.update_cache, at a start_pos each reads with `.item()` (and one the rest reads for them
all: stock; and with a dynamic length, by region; a floor
division of start_pos: stock);
tests/test_intx_memo.py an 8da4w project built cold and rebuilt from the intx memo.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from lowerd.lowering.edge_speedups import validated_versions
from lowerd.lowering.region_assembly import (
    Assembly,
    Copy,
    NotLocal,
    Template,
    assembled_program,
    program_fake_mode,
)
from lowerd.lowering.region_cut import CHECKS, Region, cut, is_check, regions, structure
from lowerd.lowering.region_passes import why_passes
from lowerd.lowering.template_store import TemplateStore

log = logging.getLogger(__name__)

# Node metadata of a layer's aten nodes the argument covers.
_LAYER_META = frozenset(
    {
        "val",
        "tensor_meta",
        "stack_trace",
        "nn_module_stack",
        "torch_fn",
        "custom",
        "seq_nr",
        "from_node",
        "original_aten",
        "eager_input_vals",
        "source_fn_stack",
        "unbacked_bindings",
    }
)
# Node metadata of a layer template's edge nodes the argument covers, by node kind (its output
# node is not copied: the assembly makes the program's own).
_EDGE_META = {
    "call_function": _LAYER_META | {"debug_handle"},
    "placeholder": _LAYER_META | {"desc", "example_value"},
}
_INPUT_KINDS = frozenset({"USER_INPUT", "PARAMETER", "BUFFER"})
_CHECKS = frozenset({"aten._assert_tensor_metadata.default"}) | CHECKS
# ExecuTorch's LLM custom ops the argument covers (executorch.extension.llm.custom_ops), by the
# index of their start_pos argument, which must be a constant.
CUSTOM_OPS = {"llama.custom_sdpa.default": 3, "llama.update_cache.default": 2}
# torchao's affine q/dq ops, which 8da4w linears are made of (XNNPACK's QDQAffineConfigs): the
# ops outside aten the argument covers, with the getitems of choose_qparams their q/dq chains.
QDQ_OPS = frozenset(
    {
        "torchao.choose_qparams_affine.default",
        "torchao.quantize_affine.default",
        "torchao.dequantize_affine.default",
    }
)
# EdgeCompileConfig fields the argument covers at any value (the others must be the default).
_CONFIG_ARGUED = frozenset({"_check_ir_validity", "_skip_dim_order"})


@dataclass(frozen=True)
class RegionalRun:
    """One method's edge generation while installed (or one call's, refused as a whole):
    regional, or stock and why."""

    regions: int
    templates: int
    stock_because: str | None  # None: the program was assembled
    # The method it generated, or a refused call's methods (none named: every method).
    methods: tuple[str, ...] = ("forward",)
    reused: int = 0  # templates read back from the store (template_store.py), not generated


@dataclass
class RegionalEdge:
    """Regional edge generation for one lowering; `runs` records what each call did."""

    # What to_edge_transform_and_lower runs on the edge programs after edge generation
    # (region_passes.py: only the argued ones let this lowering go by region).
    transform_passes: Any = None
    runs: list[RegionalRun] = field(default_factory=list)
    # Templates kept across builds (template_store.py); None: each is generated.
    store: TemplateStore | None = None

    @property
    def assembled(self) -> int:
        return sum(1 for run in self.runs if run.stock_because is None)

    @contextmanager
    def installed(self) -> Iterator[RegionalEdge]:
        """ExecuTorch's to_edge_transform_and_lower generates edge programs regionally until
        exit (open it inside EdgeSpeedups.installed(), whose replay skipping then applies to
        each template's stock run)."""
        if not validated_versions():
            why = "torch/ExecuTorch are not the validated versions"
            self.runs.append(RegionalRun(0, 0, why, ()))
            log.debug("stock edge generation: %s", why)
            yield self
            return
        from executorch.exir.program import _program

        stock = _program._gen_edge_manager_for_partitioners

        def regional(
            partitioner: Any,
            aten_programs: Any,
            config: Any,
            constant_methods: Any,
            generate_etrecord: Any = False,
        ) -> Any:
            args = (partitioner, aten_programs, config, constant_methods, generate_etrecord)
            return self._generate(stock, args)

        # The module's function is swapped for this lowering only and restored below.
        _program._gen_edge_manager_for_partitioners = regional
        try:
            yield self
        finally:
            _program._gen_edge_manager_for_partitioners = stock

    def _generate(self, stock: Any, args: tuple[Any, ...]) -> Any:
        partitioner, aten_programs, config, constant_methods, _ = args
        stock = _from_no_pending_symbols(stock)
        names = tuple(aten_programs)
        why = why_passes(self.transform_passes) or why_stock_call(*args)
        if why is not None:
            return self._stock(stock, args, [RegionalRun(0, 0, why, names)])
        edges: dict[str, Any] = {}
        preserved: set[Any] = set()
        runs = []
        for name, program in aten_programs.items():
            run, edge, kept = self._method(stock, name, program, config, partitioner[name])
            runs.append(run)
            edges[name], preserved = edge, preserved | set(kept)
        if all(run.stock_because is not None for run in runs):
            return self._stock(stock, args, runs)
        for name, run in zip(names, runs, strict=True):
            if run.stock_because is not None:  # this method alone, as stock's loop makes it
                edges[name], kept = _stock_method(stock, name, edges[name], config, partitioner)
                preserved |= set(kept)
        from executorch.exir.program._program import EdgeProgramManager

        self.runs.extend(runs)
        for run in runs:
            if run.stock_because is None:
                log.debug(
                    "regional edge generation: %d regions from %d templates (%s)",
                    run.regions,
                    run.templates,
                    run.methods[0],
                )
            else:
                log.debug("stock edge generation of %s: %s", run.methods[0], run.stock_because)
        # As stock's: every method's preserved ops join the config's exception list after all
        # were generated (each method's verifier was made before, from the list as it was).
        config._core_aten_ops_exception_list = list(
            set(config._core_aten_ops_exception_list) | preserved
        )
        kept_ops = sorted(preserved, key=str)
        return EdgeProgramManager(edges, constant_methods, config, kept_ops)

    def _method(
        self, stock: Any, name: str, program: Any, config: Any, partitioners: list[Any]
    ) -> tuple[RegionalRun, Any, list[Any]]:
        """One method's edge program assembled and the ops it preserved; or, with why not, the
        aten program back."""
        found, why = program_regions(program)
        if why is not None or found is None:
            return RegionalRun(0, 0, why or "no regions", (name,)), program, []
        before = self.store.reused if self.store is not None else 0
        try:
            templates, keys = _templates(stock, program, found, config, partitioners, self.store)
        except NotLocal as error:
            return RegionalRun(len(found), 0, str(error), (name,)), program, []
        reused = (self.store.reused if self.store is not None else 0) - before
        try:
            edge, kept = _assembled(program, found, templates, keys, config)
        except NotLocal as error:
            run = RegionalRun(len(found), len(templates), str(error), (name,), reused)
            return run, program, []
        return RegionalRun(len(found), len(templates), None, (name,), reused), edge, kept

    def _stock(self, stock: Any, args: tuple[Any, ...], runs: list[RegionalRun]) -> Any:
        self.runs.extend(runs)
        for run in runs:
            log.debug("stock edge generation: %s", run.stock_because)
        return stock(*args)


def _from_no_pending_symbols(stock: Any) -> Any:
    """ExecuTorch's function, each call made with no unbacked symbol pending in the programs'
    ShapeEnv, as export leaves it. A run over a program with `.item()`s leaves the symbols its
    passes' fake propagation allocated pending (nothing binds them), and the next trace in that
    ShapeEnv raises on them: a template's run would break the next one, and the fallback."""

    def call(partitioner: Any, programs: Any, *rest: Any) -> Any:
        for program in programs.values():
            shape_env = getattr(program_fake_mode(program), "shape_env", None)
            if shape_env is not None:
                shape_env.pending_fresh_unbacked_symbols.clear()
        return stock(partitioner, programs, *rest)

    return call


def _own_config(config: Any) -> Any:
    """A copy of the config for one stock run: that run adds the ops it preserved to its own
    exception list, not to the lowering's."""
    own = copy.copy(config)
    own._core_aten_ops_exception_list = list(config._core_aten_ops_exception_list)
    return own


def _stock_method(
    stock: Any, name: str, program: Any, config: Any, partitioner: Any
) -> tuple[Any, list[Any]]:
    """One method's edge program by ExecuTorch's own function called on it alone, with a copy
    of the config (its verifier is made from the exception list as stock's loop has it), and
    the ops it preserved."""
    own = _own_config(config)
    manager = stock({name: partitioner[name]}, {name: program}, own, None)
    added = set(own._core_aten_ops_exception_list) - set(config._core_aten_ops_exception_list)
    return manager.exported_program(name), sorted(added, key=str)


def why_stock_call(
    partitioner: Any, programs: Any, config: Any, constant_methods: Any, etrecord: Any
) -> str | None:
    """Why this call is not one the argument covers, or None."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig

    if etrecord:
        return "an etrecord is asked for"
    for name in programs:
        partitioners = list((partitioner or {}).get(name) or [])
        if not partitioners:
            return f"no partitioner for {name}"
        for each in partitioners:
            inner = getattr(each, "inner", each)
            if type(inner) is not XnnpackPartitioner:
                return f"a partitioner other than XNNPACK's ({type(inner).__name__})"
    default = EdgeCompileConfig()
    for option in dataclasses.fields(config):
        if option.name in _CONFIG_ARGUED:
            continue
        if getattr(config, option.name) != getattr(default, option.name):
            return f"EdgeCompileConfig.{option.name} is not the default"
    return None


def program_regions(program: Any) -> tuple[list[Region] | None, str | None]:
    """The program's regions, or why the argument does not cover it."""
    why = _why_signature(program)
    if why is not None:
        return None, why
    found = regions(program)
    if found is None:
        return None, "a layer's nodes are not contiguous"
    region_of = {node: region.key for region in found for node in region.nodes}
    buffers = program.graph_signature.inputs_to_buffers
    for node in program.graph.nodes:
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            continue
        if target.namespace != "aten" and not _argued_op(target):
            return None, f"an op of namespace {target.namespace} ({target})"
        if why := _why_custom_op(node, target):
            return None, why
        if why := _why_mutation(node, target, region_of, buffers):
            return None, why
    if why := _why_aliased_read(program, region_of):
        return None, why
    if why := _why_unbacked(program, region_of):
        return None, why
    if why := _why_crossing_chain(program, region_of):
        return None, why
    layers = [region for region in found if region.key is not None]
    for region in layers:
        why = _why_layer(program, region)
        if why is not None:
            return None, why
    shapes = [structure(program, region) for region in layers]
    if len(set(shapes)) == len(shapes):
        return None, "no two layers of one structure"
    return found, None


def _why_signature(program: Any) -> str | None:
    signature = program.graph_signature
    if unusual := [s.kind.name for s in signature.input_specs if s.kind.name not in _INPUT_KINDS]:
        return f"a {unusual[0]} input"
    if unusual := [s.kind.name for s in signature.output_specs if s.kind.name != "USER_OUTPUT"]:
        return f"a {unusual[0]} output"
    for name, value in [*program.state_dict.items(), *program.constants.items()]:
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            return f"{name} is a {type(value).__name__}"
    return _why_symbols(program)


def _why_layer(program: Any, region: Region) -> str | None:
    """Why a layer is not one the argument covers: a call but an aten op, an input made by a
    get_attr, metadata it does not know, a node nothing uses."""
    for node in region.inputs:
        if node.op == "get_attr":
            return f"{region.key} reads {node.target}"
    for node in region.nodes:
        target = node.target
        if (
            target is not operator.getitem
            and not is_check(node)
            and (
                not isinstance(target, torch._ops.OpOverload)
                or isinstance(target, torch._ops.TorchBindOpOverload)
            )
        ):
            return f"{region.key} calls {target}"
        if unknown := sorted(set(node.meta) - _LAYER_META):
            return f"metadata {unknown[0]!r} on {node.name}"
        if node.meta.get("custom"):
            return f"custom metadata on {node.name}"
        if not node.users and str(target) not in _CHECKS and not _writes_buffer(program, node):
            return f"{node.name} has no users"
    return None


def _writes_buffer(program: Any, node: torch.fx.Node) -> bool:
    """An in-place write of a buffer is used (by the BUFFER_MUTATION output the replay makes)."""
    buffers = program.graph_signature.inputs_to_buffers
    return any(
        isinstance(value, torch.fx.Node) and value.name in buffers for value in written(node)
    )


def _why_mutation(
    node: torch.fx.Node,
    target: torch._ops.OpOverload,
    region_of: dict[torch.fx.Node, Any],
    buffers: dict[str, str],
) -> str | None:
    """Export's IR keeps in-place ops until the first replay functionalizes them: that is local
    to a region only when what is written was made in the node's region and is read nowhere
    else, or is a buffer only that layer uses (`_why_buffer_write`)."""
    for value in written(node):
        if not isinstance(value, torch.fx.Node):
            return f"{node.name} writes {value!r} ({target})"
        if value.op == "placeholder" and value.name in buffers:
            if why := _why_buffer_write(node, value, region_of):
                return f"{why} ({target})"
            continue
        if (base := _placeholder_base(value)) is not None:
            # Functionalization writes the base back (slice_scatter, ...) lazily: at its next
            # read or at the graph's end, which for a layer cut out alone is the layer's end.
            return f"{node.name} writes a view of {base.name} ({target})"
        inside = node in region_of and region_of.get(value, object()) == region_of[node]
        if not inside or any(region_of.get(user) != region_of[node] for user in value.users):
            return f"{node.name} mutates {value.name}, not its region's own ({target})"
    return None


def _why_buffer_write(
    writer: torch.fx.Node, buffer: torch.fx.Node, region_of: dict[torch.fx.Node, Any]
) -> str | None:
    """A buffer written in place (a KV cache) is local to the layer that writes it when that
    layer alone uses it, its views and the write's result: its cut then holds the buffer as
    its own buffer input with every read and write, and the template's functionalizing replay
    makes the write and its BUFFER_MUTATION output as stock's does (region_edge.py's argument).
    Written in the rest (whose cut is split around the layers), or used by another region or
    by the program's output: stock."""
    layer = region_of.get(writer)
    if layer is None:
        return f"{writer.name} writes {buffer.name} outside a layer"
    aliased = _aliases([writer, buffer])
    for node in [node for node in writer.graph.nodes if node in aliased]:  # in a stable order
        for user in node.users:
            if region_of.get(user) != layer:
                where = region_of.get(user, "the output") or "the rest"
                verb = "writes" if node in written(user) else "uses"
                return f"{writer.name} writes {buffer.name}, which {where} {verb} too"
    return None


def _placeholder_base(node: torch.fx.Node) -> torch.fx.Node | None:
    """The input (placeholder) a view op's result is a view of, through views, or None."""
    base = _view_base(node)
    while base is not None and base.op != "placeholder":
        base = _view_base(base)
    return base


def written(node: torch.fx.Node) -> list[Any]:
    """The arguments an op writes in place, by its schema's alias annotations (any namespace)."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return []
    return [
        node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
        for index, argument in enumerate(target._schema.arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
    ]


def _why_aliased_read(program: Any, region_of: dict[torch.fx.Node, Any]) -> str | None:
    """Functionalization applies an in-place update lazily: a view of the tensor written (or
    the in-place op's result, the same tensor) is emitted again where it is next read, with the
    reader's metadata. OPT's mask is `copy_` into a clone in the rest, and each layer's
    `alias(copy_)` is emitted at the layer's SDPA: its from_node root is the SDPA, so its debug
    handle (which XNNPACK writes into the blob) is the SDPA's. A layer cut out alone reads a
    fresh input and emits the alias at its own node. So a tensor written in place, its bases
    and its views, read in another region than the writer's: stock. (Read only in the writer's
    region, as a KV cache buffer by its layer, the cut holds the write and the reads.)"""
    for writer in program.graph.nodes:
        values = [value for value in written(writer) if isinstance(value, torch.fx.Node)]
        if not values:
            continue
        region = region_of.get(writer)
        aliased = _aliases([writer, *values])
        for node in [node for node in program.graph.nodes if node in aliased]:
            for user in node.users:
                if user.op == "call_function" and region_of.get(user) != region:
                    where = region_of.get(user) or "the rest"
                    return f"{where} reads {node.name}, a tensor written in place elsewhere"
    return None


def _argued_op(target: torch._ops.OpOverload) -> bool:
    """An op outside aten the argument covers: torchao's q/dq ops, ExecuTorch's custom_sdpa and
    update_cache."""
    return str(target) in QDQ_OPS or str(target) in CUSTOM_OPS


def _why_custom_op(node: torch.fx.Node, target: torch._ops.OpOverload) -> str | None:
    """custom_sdpa and update_cache are per node when start_pos is a constant of the node's own
    arguments or an unbacked symbol (each layer's `.item()` in optimum's recipe: where it is
    bound, `_why_unbacked`); a backed symbol is not argued."""
    index = CUSTOM_OPS.get(str(target))
    if index is None:
        return None
    start = node.args[index] if index < len(node.args) else node.kwargs.get("start_pos")
    if type(start) is int or _unbacked_int(start):
        return None
    return f"{node.name}'s start_pos is neither a constant nor an unbacked symbol ({target})"


def _unbacked_int(value: Any) -> bool:
    """A node whose value is a SymInt of unbacked symbols alone (an `.item()`'s)."""
    from torch.fx.experimental.symbolic_shapes import free_symbols, free_unbacked_symbols

    symbolic = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    if not isinstance(symbolic, torch.SymInt):
        return False
    return bool(free_symbols(symbolic)) and free_symbols(symbolic) == free_unbacked_symbols(
        symbolic
    )


def _why_crossing_chain(program: Any, region_of: dict[torch.fx.Node, Any]) -> str | None:
    """XNNPACK's check of a linear (whether edge generation keeps it, and as what precision)
    walks back its q/dq chain: the activation's dequantize, its quantize, the getitems and their
    choose_qparams, the weight's dequantize with its scale and zero point, and reads each one's
    target, arguments and their values. A cut reads them as stock does only if the chain is in
    the linear's region: so a q/dq node (or a getitem of one) whose user, or whose q/dq input, is
    in another region: stock. (Its float input may come from anywhere: the chain's check stops
    at choose_qparams, and reads of that input's value are of its placeholder's, the same.)"""
    for node in program.graph.nodes:
        if not _in_chain(node):
            continue
        region = region_of.get(node)
        linked = [n for n in node.all_input_nodes if _in_chain(n)] + list(node.users)
        for other in linked:
            if other.op != "output" and region_of.get(other) != region:
                where, there = region or "the rest", region_of.get(other) or "the rest"
                return f"a q/dq chain crosses from {where} to {there} ({node.name}, {other.name})"
    return None


def _in_chain(node: torch.fx.Node) -> bool:
    """A torchao q/dq op's node, or a getitem of one (choose_qparams' scale and zero point)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return any(_in_chain(n) for n in node.all_input_nodes[:1])
    return str(node.target) in QDQ_OPS


def _aliases(written: list[torch.fx.Node]) -> set[torch.fx.Node]:
    """The tensors written, their bases (a view written in place writes its base), and every
    view of those (read as the tensor written)."""
    aliased = set(written)
    for node in written:
        while (base := _view_base(node)) is not None and base not in aliased:
            aliased.add(base)
            node = base
    pending = list(aliased)
    while pending:
        node = pending.pop()
        for user in node.users:
            if user not in aliased and _view_base(user) is node:
                aliased.add(user)
                pending.append(user)
    return aliased


def _view_base(node: torch.fx.Node) -> torch.fx.Node | None:
    """The tensor a view op's result aliases (its first argument), or None."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return None
    returns = target._schema.returns
    if not any(r.alias_info is not None and not r.alias_info.is_write for r in returns):
        return None
    base = node.args[0] if node.args else None
    return base if isinstance(base, torch.fx.Node) else None


def _why_symbols(program: Any) -> str | None:
    """Why the program's symbolic values are not ones the argument covers: backed SymInt sizes
    (a dynamic dimension's `s0`, shared by every region through the rest's one binding), and
    unbacked SymInts and the SymBools of their runtime assertions (`u0` of an `.item()`, with
    its `_assert_scalar` nodes) each bound by one node as its value (`_why_unbacked`, once
    the regions are known); an unbacked symbol in a tensor's size or stride, a SymFloat, a
    SymBool of a backed symbol: not argued."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    for node in program.graph.nodes:
        value = node.meta.get("val")
        if node.op == "output" or value is None:
            continue
        if isinstance(value, torch.Tensor) and (unbacked := free_unbacked_symbols(value)):
            names = ", ".join(sorted(map(str, unbacked)))
            return f"unbacked symbols in a tensor's size ({names} in {node.name})"
        if _symbolic_float(value):
            return f"{node.name} is a symbolic float"
        if isinstance(value, torch.SymBool) and not free_unbacked_symbols(value):
            # `s0 <= 8`: a guard export keeps as a node; not argued (`s0 + u0 <= 8`, update_cache's
            # check with a dynamic length, is: it holds its layer's unbacked symbol).
            return f"{node.name} is a symbolic bool of backed symbols alone"
        bindings = node.meta.get("unbacked_bindings") or {}
        if any(path != () for path in bindings.values()) or (
            bindings and not isinstance(value, torch.SymInt)
        ):
            return f"{node.name} binds an unbacked symbol inside its value"
    return None


def _why_unbacked(program: Any, region_of: dict[torch.fx.Node, Any]) -> str | None:
    """An unbacked symbol is local to the region whose node binds it when every node whose
    value or arguments hold it is in that region: the replays' fresh symbols and the ShapeEnv's
    facts on it (its range, its assertions) then come of that region's nodes alone."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    binder: dict[Any, torch.fx.Node] = {}
    for node in program.graph.nodes:
        for symbol in node.meta.get("unbacked_bindings") or {}:
            binder.setdefault(symbol, node)
    for node in program.graph.nodes:
        held = set(free_unbacked_symbols(node.meta.get("val"))) if node.op != "output" else set()
        for arg in node.all_input_nodes:
            if isinstance(arg.meta.get("val"), (torch.SymInt, torch.SymBool)):
                held |= free_unbacked_symbols(arg.meta["val"])
        for symbol in sorted(held, key=str):
            bound = binder.get(symbol)
            if bound is None:
                return f"{node.name} holds {symbol}, which no node binds"
            if node.op == "output" or region_of.get(node) != region_of.get(bound):
                where = region_of.get(bound) or "the rest"
                return f"{node.name} uses {symbol}, which {where} binds"
    return None


def _symbolic_float(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_symbolic_float(v) for v in value)
    return isinstance(value, torch.SymFloat)


def _templates(
    stock: Any,
    program: Any,
    found: list[Region],
    config: Any,
    partitioners: list[Any],
    store: TemplateStore | None = None,
) -> tuple[dict[Any, Template], list[Any]]:
    """ExecuTorch's own edge generation once per distinct region structure (the rest is its
    own), each on the region cut out alone, with a copy of the config (stock's call adds the
    ops it preserved to the config's exception list); with a store, a template an earlier
    build kept is read back instead (template_store.py), and one made is kept."""
    by_structure: dict[Any, Template] = {}
    keys = []
    for region in found:
        key = (region.key is None, structure(program, region))
        keys.append(key)
        if key in by_structure:
            continue
        stored_key = store.key(program, region, key[1], config, partitioners) if store else None
        if store is not None and (kept := store.get(stored_key, program, region)) is not None:
            if region.key is not None:
                _check_layer_edge(kept.edge, region)
            by_structure[key] = kept
            continue
        own = _own_config(config)
        alone = cut(program, region)
        facts = _backed_facts(program)
        try:
            manager = stock({"forward": partitioners}, {"forward": alone}, own, None)
        except Exception as error:  # the whole program's own run says what is wrong, if anything
            raise NotLocal(f"{region.key or 'the rest'} alone: {error!r}") from error
        if _backed_facts(program) != facts:
            raise NotLocal(f"{region.key or 'the rest'} alone refines a dynamic size's range")
        edge = manager.exported_program("forward")
        if region.key is not None:
            _check_layer_edge(edge, region)
        preserved = list(own._core_aten_ops_exception_list)
        by_structure[key] = Template(region, edge, id(alone.graph), preserved)
        if store is not None:
            store.put(stored_key, program, by_structure[key])
    return by_structure, keys


def _backed_facts(program: Any) -> list[tuple[str, str, str]]:
    """What the program's ShapeEnv knows of its backed symbols (a dynamic length's `s0`): the
    range and replacement of each. A template's run that changed them (a runtime assertion of
    `s0 + u0 <= 8` may refine `s0`'s range) would make the regions after it in another state
    than stock's run, which meets that fact once, at that layer: not argued."""
    shape_env = getattr(program_fake_mode(program), "shape_env", None)
    if shape_env is None:
        return []
    return [
        (str(s), str(shape_env.var_to_range.get(s)), str(shape_env.replacements.get(s)))
        for s in sorted(program.range_constraints, key=str)
    ]


def _check_layer_edge(edge: Any, region: Region) -> None:
    """A layer template's edge program holds only what the argument covers."""
    if any(module is not edge.graph_module for module in edge.graph_module.modules()):
        raise NotLocal(f"{region.key}'s edge program holds a nested module")
    for node in edge.graph.nodes:
        if node.op == "output":
            continue
        known = _EDGE_META.get(node.op)
        if known is None:
            raise NotLocal(f"a {node.op} node in {region.key}'s edge program")
        if unknown := sorted(set(node.meta) - known):
            raise NotLocal(f"edge metadata {unknown[0]!r} on {node.name}")
        if node.meta.get("custom"):
            raise NotLocal(f"custom metadata on {node.name}")


def _assembled(
    program: Any, found: list[Region], templates: dict[Any, Template], keys: list[Any], config: Any
) -> tuple[Any, list[Any]]:
    """The whole edge program from the templates, and the ops they preserved."""
    from executorch.exir.verification.verifier import EXIREdgeDialectVerifier

    asm = Assembly(program)
    asm.build([Copy(templates[key], region) for key, region in zip(keys, found, strict=True)])
    module = asm.finish()
    preserved = sorted({op for t in templates.values() for op in t.preserved}, key=str)
    verifier = EXIREdgeDialectVerifier(
        edge_compile_config=config, class_only=True, preserve_ops=preserved
    )
    return assembled_program(program, module, asm, [verifier]), preserved
