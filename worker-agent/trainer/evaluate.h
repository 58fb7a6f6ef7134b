// Accuracy (and mean loss) of a model over a whole data set.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_EVALUATE_H_
#define KUBEPS_WORKER_AGENT_TRAINER_EVALUATE_H_

#include "worker-agent/trainer/fashion_mnist.h"
#include "worker-agent/trainer/model.h"

namespace kubeps::trainer {

// Runs the model forward over every example of `data` in order, `batch` at a
// time (the last batch may be smaller), and returns the fraction classified
// correctly, in [0, 1] (0 for an empty data set). When mean_loss is not null
// it receives the mean cross-entropy over all examples. Grads are untouched.
double Evaluate(Model& model, const Dataset& data, int batch, double* mean_loss = nullptr);

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_EVALUATE_H_
