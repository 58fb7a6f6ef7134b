"""kubeps.torch's declared parameters: each one's views over the shared-memory file,
which of the optimizer's parameters are declared and by what name, and its gradient: the
hook that tells when backward has it, its copy into the file, and the check that what was
sent is still what .grad holds at step()."""

import importlib
import warnings

import torch

from kubeps.errors import FailedPrecondition, InvalidArgument


# The parameter types kubeps carries. The servers keep and update float32 values: a float16 or
# bfloat16 parameter is their rounding (the servers hold mixed precision's master weights), and
# its gradient goes up as float32.
CARRIED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


# Wrappers invisible in the names the workers and servers agree on, so that the servers' tensors
# and checkpoints are the same with or without them, and a job resumes when a run adds or drops
# one: torch.compile's (its OptimizedModule's submodule, at any depth), and nn.DataParallel's or
# DistributedDataParallel's (a prefix every name of the wrapped model has).
COMPILE_WRAPPER = "_orig_mod"
PARALLEL_WRAPPER = "module."


def _without_compile(name):
    return ".".join(part for part in name.split(".") if part != COMPILE_WRAPPER)


def parameter_names(names):
    """The names the workers and servers agree on, for all of a model's names in order."""
    names = [_without_compile(name) for name in names]
    if names and all(name.startswith(PARALLEL_WRAPPER) for name in names):
        names = [name[len(PARALLEL_WRAPPER):] for name in names]
    return names


def declared_names(keys, declared):
    """Each of `keys` (a state_dict's, in order) as `declared` spells it, or None where it is
    not there. The keys are read as they are, or all without the parallel wrapper's prefix:
    whichever finds more of them declared (the state_dict of the wrapper, or of the model in
    it, against names declared either way). Never key by key: a model may have a submodule
    named "module" of its own."""
    keys = [_without_compile(key) for key in keys]
    as_given = [key if key in declared else None for key in keys]
    unwrapped = [key[len(PARALLEL_WRAPPER):] if key.startswith(PARALLEL_WRAPPER) else None
                 for key in keys]
    unwrapped = [key if key in declared else None for key in unwrapped]
    found = sum(key is not None for key in unwrapped) > sum(key is not None for key in as_given)
    return unwrapped if found else as_given


class Binding:
    """One declared parameter: the torch parameter and its two regions as torch views."""

    __slots__ = ("name", "param", "shape", "values", "grads", "sent")

    def __init__(self, name, param, slot, buffer):
        self.name = name
        self.param = param
        self.shape = tuple(param.shape)
        self.values = _view(buffer, slot.values_offset, slot.numel, self.shape)
        self.grads = _view(buffer, slot.grads_offset, slot.numel, self.shape)
        self.sent = None  # (gradient, its version) as backward's hook copied it


def _view(buffer, offset, numel, shape):
    with warnings.catch_warnings():
        # frombuffer warns for read-only buffers only; the mapping is writable.
        warnings.simplefilter("ignore")
        flat = torch.frombuffer(buffer, dtype=torch.float32, count=numel, offset=offset)
    return flat.view(shape)


def copy_gradient(binding):
    """param.grad into the grads region (zeros without one), checked against the declaration."""
    grad = binding.param.grad
    if grad is None:
        binding.grads.zero_()
        return
    if tuple(grad.shape) != binding.shape:
        raise InvalidArgument(
            "the gradient of %r has shape %s, but %r was declared to kubeps with shape %s "
            "(did the parameter change shape after DistributedOptimizer was made?)"
            % (binding.name, list(grad.shape), binding.name, list(binding.shape)))
    # A sparse gradient's repeated rows are summed in float32, not in a half type.
    binding.grads.copy_(grad.float().to_dense() if grad.is_sparse else grad)


def trainable_params(optimizer, named_parameters):
    """[(name, param)] of the optimizer's trainable parameters, in its order (the key order)."""
    in_optimizer = [p for group in optimizer.param_groups for p in group["params"]]
    if named_parameters is None:
        names = {}
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                names[id(p)] = "param_groups.%d.%d" % (g, i)
    else:
        named_parameters = list(named_parameters)
        if any(not isinstance(entry, tuple) or len(entry) != 2 for entry in named_parameters):
            raise InvalidArgument("DistributedOptimizer: named_parameters must be (name, "
                                  "parameter) pairs, as model.named_parameters() gives")
        names = {}
        seen = set()
        agreed = parameter_names(name for name, _ in named_parameters)
        for name, (_, p) in zip(agreed, named_parameters):
            if name in seen:
                raise InvalidArgument("DistributedOptimizer: the name %r appears twice in "
                                      "named_parameters" % name)
            seen.add(name)
            names[id(p)] = name
    params = []
    for p in in_optimizer:
        if not p.requires_grad:
            continue  # frozen: never pushed, so never declared
        name = names.get(id(p))
        if name is None:
            raise InvalidArgument(
                "DistributedOptimizer: a parameter of the optimizer (shape %s) is not in "
                "named_parameters; every trainable parameter needs its name, the key all "
                "workers agree on" % list(p.shape))
        if p.dtype not in CARRIED_DTYPES:
            raise InvalidArgument(
                "DistributedOptimizer: parameter %r is %s; kubeps carries float32, bfloat16 and "
                "float16 (model.float() converts a model)"
                % (name, str(p.dtype).replace("torch.", "")))
        params.append((name, p))
    if not params:
        raise InvalidArgument("DistributedOptimizer: the optimizer has no trainable parameter")
    return params


def frozen_params(optimizer, named_parameters):
    """[(name or None, param)] of the optimizer's parameters not trainable now (never declared)."""
    named_parameters = list(named_parameters or [])
    agreed = parameter_names(name for name, _ in named_parameters)
    names = {id(p): name for name, (_, p) in zip(agreed, named_parameters)}
    return [(names.get(id(p)), p) for group in optimizer.param_groups for p in group["params"]
            if not p.requires_grad]


def param_count(optimizer):
    return sum(len(group["params"]) for group in optimizer.param_groups)


def check_declared_unchanged(optimizer, frozen, declared_count):
    """A parameter kubeps never declared that is trainable now (made so after wrapping, or
    added with add_param_group) is said: the servers never see it, so it would
    never change with their optimizer, and with 'none' each worker would step its own copy
    on its own gradient, the copies drifting apart."""
    if param_count(optimizer) != declared_count:
        raise FailedPrecondition(
            "the optimizer holds %d parameters, but %d were there when the DistributedOptimizer "
            "was made (add_param_group?): kubeps declares the parameters once; put every "
            "parameter in the optimizer before wrapping it" % (param_count(optimizer),
                                                               declared_count))
    for name, p in frozen:
        if p.requires_grad:
            raise FailedPrecondition(
                "%s is trainable, but it was not when the DistributedOptimizer was made, so "
                "kubeps never declared it and the workers would not share it: set "
                "requires_grad before wrapping the optimizer"
                % (repr(name) if name else "a parameter of shape %s" % list(p.shape)))


def outside_compiled_graphs(hook):
    """`hook`, which torch.compile'd code calls as it is instead of tracing it into a graph
    (torch 2.x): it waits on the agent and writes parameters in place, which a graph cannot
    hold.  Unchanged where torch has no compiler."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)  # torch >= 2.1
    if disable is None:
        try:  # torch 2.0, which does not import it with torch
            disable = importlib.import_module("torch._dynamo").disable
        except (ImportError, AttributeError):  # torch 1.x: nothing compiles
            return hook
    return disable(hook)


def modules_and_their_parameters(model):
    """(module, the parameters its forward reads) for each module of `model`: its own, and
    those its parametrizations compute its tensors from (torch.nn.utils.parametrize keeps
    them in modules whose forward never runs: the parametrized module's reads them).  An
    nn.DataParallel copies every parameter below it to its devices before any of those
    modules runs: it reads them all."""
    parametrized = {id(m) for m in model.modules()
                    if isinstance(getattr(m, "parametrizations", None), torch.nn.ModuleDict)}
    claimed = {id(p) for m in model.modules() if id(m) in parametrized
               for p in m.parametrizations.parameters()}
    replicated = set()  # the modules below an nn.DataParallel
    for module in model.modules():  # parents first
        if id(module) in replicated:
            continue
        if isinstance(module, torch.nn.DataParallel):
            replicated.update(id(m) for m in module.modules())
            yield module, list(module.parameters())
            continue
        params = [p for p in module.parameters(recurse=False) if id(p) not in claimed]
        if id(module) in parametrized:
            params += list(module.parametrizations.parameters())
        yield module, params


def first_forward_pre_hook(module, hook):
    """Registers `hook` to run before the module's other forward pre-hooks (weight_norm's
    makes the weight from weight_g and weight_v: from the new values, not the old)."""
    try:
        return module.register_forward_pre_hook(hook, prepend=True)  # torch >= 2.0
    except TypeError:
        handle = module.register_forward_pre_hook(hook)
        module._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle


def register_gradient_hook(param, hook):
    """Calls hook() each time backward has accumulated param.grad; returns (what must be
    kept, the hook's handle). The handle's remove() takes the hook off at the session's
    end: on torch >= 2.1 the parameter holds it, and the optimizer with it."""
    if hasattr(param, "register_post_accumulate_grad_hook"):  # torch >= 2.1
        return None, param.register_post_accumulate_grad_hook(hook)
    # Older torch: hook the parameter's gradient accumulator, the node that
    # writes param.grad.  The parameter keeps it only weakly, so the caller
    # keeps the node alive (and the hook with it).
    with torch.enable_grad():
        accumulator = param.expand_as(param).grad_fn.next_functions[0][0]
    return accumulator, accumulator.register_hook(hook)


def check_sent_gradients_unchanged(bindings):
    """A gradient changed in place or replaced after backward's hook sent it (clipped,
    unscaled by a GradScaler) changes nothing the servers see: that is said, not ignored.
    One set to None (zero_grad) changed nothing that was sent."""
    for binding in bindings:
        sent, binding.sent = binding.sent, None
        grad = binding.param.grad
        if sent is None or grad is None or (grad is sent[0] and grad._version == sent[1]):
            continue
        forget_sent(bindings)
        raise FailedPrecondition(
            "the gradient of %r changed after backward computed it (clipped? unscaled by a "
            "GradScaler?), but kubeps had sent it to the servers as backward went, so the change "
            "would be lost. To change the gradients, run the job with the servers' optimizer "
            "'none' (spec.optimizer.name), call optimizer.synchronize() after backward, change "
            "the averaged gradients it leaves in .grad, then call optimizer.step() (with a "
            "GradScaler: synchronize() before scaler.unscale_() or scaler.step(), and "
            "spec.nonFinite: SkipStep)" % binding.name)


def all_finite(bindings):
    """Whether every pulled value (with the servers' optimizer 'none': the mean) is finite."""
    return all(bool(torch.isfinite(b.values).all()) for b in bindings)


def forget_sent(bindings):
    """What the hooks sent is checked no more (an error about the step was raised)."""
    for binding in bindings:
        binding.sent = None
