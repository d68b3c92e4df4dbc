"""`SAGAN`: the generator and discriminator trained together, one training
step on every backend."""

import keras
from keras import ops

from keras_attention.models.sagan.common import check_image_shape
from keras_attention.models.sagan.discriminator import sagan_discriminator
from keras_attention.models.sagan.generator import sagan_generator
from keras_attention.models.sagan.sampling import generator_inputs, sample_images
from keras_attention.models.saving import ConfigMixin
from keras_attention.utils import keras_internals


@keras.saving.register_keras_serializable(package="keras_attention")
class SAGAN(ConfigMixin, keras.Model):
    """Self-Attention GAN: the generator and discriminator trained together
    with the hinge loss and the two time-scale update rule.

    Both networks are residual convolutional networks with spectral
    normalization on every layer (`keras.layers.SpectralNormalization`) and a
    `SelfAttention2D` block at `attention_resolution` (see
    `sagan_generator`, `sagan_discriminator`). One training step updates the
    discriminator once and then the generator once:

    ```
    L_D = E[relu(1 - D(x, y))] + E[relu(1 + D(G(z, y), y))]
    L_G = -E[D(G(z, y), y)]
    ```

    with separate Adam optimizers (TTUR: `beta_1 = 0`, `beta_2 = 0.9`,
    learning rates 4e-4 for D and 1e-4 for G by default). With `ema_decay`,
    an `ema_generator` keeps an exponential moving average of the generator's
    weights, updated after every step; `sample` uses it.

    `fit` on images in [-1, 1] (and labels for a conditional model) shows the
    losses on Keras's progress bar: `d_loss`, `g_loss`, and the mean logits
    `d_real` and `d_fake`. It trains on TensorFlow, JAX and PyTorch: one
    `train_step` holds the algorithm and each backend only supplies how a
    loss's gradient reaches an optimizer (`tf.GradientTape`; `backward()`;
    `jax.value_and_grad` inside the stateless step of Keras' JAX trainer, so
    that the latent draws, the batch-norm statistics, the weight average and
    the trackers carry over from step to step there too). On every backend
    the gradient with respect to a spectrally normalized kernel is taken at
    the normalized kernel that Keras' `SpectralNormalization` assigns in
    training, so the kernels keep a largest singular value near 1.
    Splitting each batch over `tf.distribute` replicas is TensorFlow's; on
    JAX a `keras.distribution` shards the batch of the same step.

    Args:
        image_shape: `(size, size, channels)`, size a power of 2, at least 8.
        latent_dim: size of `z`.
        generator_width: channels of the generator at full resolution.
        discriminator_width: channels of the discriminator's first block.
        num_classes: number of classes for the class-conditional variant
            (conditional batch norm in G, projection discriminator).
        attention: use `SelfAttention2D` in both networks (False is the
            ablation baseline).
        attention_resolution: the feature-map size they attend over.
        ema_decay: decay of the generator's weight average (e.g. 0.999), or
            None for none.
        seed: seed of the latent vectors drawn during training.
        synchronized_batch_norm: cross-replica batch norm in the generator
            under a `tf.distribute` strategy (see `sagan_generator`).
        **kwargs: `name` and other model arguments.

    Call arguments:
        inputs: `z` `(B, latent_dim)`, or `[z, labels]` for a conditional
            model.
        training: whether batch norm uses batch statistics.

    Returns:
        Generated images `(B, size, size, channels)` in [-1, 1].

    Example:

    ```python
    gan = keras_attention.models.SAGAN(
        image_shape=(8, 8, 1), generator_width=8, discriminator_width=8,
        latent_dim=16, attention_resolution=4,
    )
    gan.compile()
    images = np.random.uniform(-1, 1, (64, 8, 8, 1)).astype("float32")
    gan.fit(images, batch_size=32, epochs=1, verbose=0)
    samples = gan.sample(4, seed=0)  # (4, 8, 8, 1) in [0, 1]
    ```

    References:
        - [Zhang et al., 2019. Self-Attention Generative Adversarial
          Networks](https://arxiv.org/abs/1805.08318)
        - [Miyato et al., 2018. Spectral Normalization for Generative
          Adversarial Networks](https://arxiv.org/abs/1802.05957)
        - [Heusel et al., 2017. GANs Trained by a Two Time-Scale Update Rule
          Converge to a Local Nash Equilibrium](https://arxiv.org/abs/1706.08500)
        - [Lim & Ye, 2017. Geometric GAN](https://arxiv.org/abs/1705.02894)
          (the hinge loss)
    """

    config_names = (
        "image_shape",
        "latent_dim",
        "generator_width",
        "discriminator_width",
        "num_classes",
        "attention",
        "attention_resolution",
        "ema_decay",
        "seed",
        "synchronized_batch_norm",
    )

    def __init__(
        self,
        image_shape=(32, 32, 1),
        latent_dim=128,
        generator_width=32,
        discriminator_width=32,
        num_classes=None,
        attention=True,
        attention_resolution=16,
        ema_decay=None,
        seed=None,
        synchronized_batch_norm=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if ema_decay is not None and not 0.0 < ema_decay < 1.0:
            raise ValueError(
                f"`ema_decay` must be in (0, 1) or None; received {ema_decay!r}."
            )
        image_shape = check_image_shape(image_shape)
        attention = bool(attention)
        self.keep_config(SAGAN, locals())
        generator_args = {
            "image_shape": image_shape,
            "latent_dim": latent_dim,
            "width": generator_width,
            "num_classes": num_classes,
            "attention": attention,
            "attention_resolution": attention_resolution,
            "synchronized_batch_norm": synchronized_batch_norm,
        }
        self.generator = sagan_generator(**generator_args)
        self.discriminator = sagan_discriminator(
            image_shape=image_shape,
            width=discriminator_width,
            num_classes=num_classes,
            attention=attention,
            attention_resolution=attention_resolution,
        )
        self.ema_generator = None
        if ema_decay is not None:
            self.ema_generator = sagan_generator(**generator_args, name="ema_generator")
            self.ema_generator.set_weights(self.generator.get_weights())
            self.ema_generator.trainable = False
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.trackers = {
            name: keras.metrics.Mean(name=name)
            for name in ("d_loss", "g_loss", "d_real", "d_fake")
        }
        self.generator_optimizer = None
        self.discriminator_optimizer = None
        self.built = True

    def call(self, inputs, training=False):
        return self.generator(inputs, training=training)

    def compile(self, generator_optimizer=None, discriminator_optimizer=None, **kwargs):
        """Configures training, on TensorFlow, JAX or PyTorch.

        Each network has its own optimizer (the two time-scale update rule),
        built here so that a checkpoint restores into existing variables.
        Under the `mixed_float16` policy each is wrapped in a
        `LossScaleOptimizer`, whose `scale_loss` keeps float16 gradients
        from underflowing. On JAX the model's `optimizer` is an
        `OptimizerGroup` of the two: Keras' JAX trainer carries the state of
        `model.optimizer` through its stateless step.

        Args:
            generator_optimizer: default `Adam(1e-4, beta_1=0, beta_2=0.9)`.
            discriminator_optimizer: default `Adam(4e-4, beta_1=0,
                beta_2=0.9)`.
            **kwargs: more `Model.compile` arguments (`jit_compile`, ...);
                `optimizer` and `loss` are not taken.
        """
        for arg in ("optimizer", "loss"):
            if arg in kwargs:
                raise ValueError(
                    f"SAGAN.compile takes `generator_optimizer` and "
                    f"`discriminator_optimizer` (the loss is the hinge loss); "
                    f"received `{arg}`."
                )
        # No `optimizer` of the base class (it would default to RMSprop).
        super().compile(optimizer=None, **kwargs)
        optimizers = {
            "generator": (generator_optimizer, 1e-4, self.generator),
            "discriminator": (discriminator_optimizer, 4e-4, self.discriminator),
        }
        for name, (optimizer, learning_rate, network) in optimizers.items():
            if optimizer is None:
                optimizer = keras.optimizers.Adam(
                    learning_rate, beta_1=0.0, beta_2=0.9, name=f"{name}_adam"
                )
            optimizer = keras.optimizers.get(optimizer)
            if self.dtype_policy.name == "mixed_float16" and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer
            ):
                optimizer = keras.optimizers.LossScaleOptimizer(
                    optimizer, name=f"{name}_loss_scale"
                )
            # Built now so that a checkpoint restores into existing variables.
            optimizer.build(network.trainable_variables)
            setattr(self, f"{name}_optimizer", optimizer)
        if keras.backend.backend() == "jax":
            # Keras' JAX trainer threads `optimizer.variables` through its
            # stateless step: there, the variables of both optimizers.
            self.optimizer = keras_internals.OptimizerGroup(
                [self.generator_optimizer, self.discriminator_optimizer]
            )

    @property
    def metrics(self):
        return list(self.trackers.values())

    def generator_inputs(self, batch_size, labels=None, seed=None):
        """`generator_inputs` of this model's generator; `seed` defaults to
        the model's own seed generator."""
        seed = self.seed_generator if seed is None else seed
        return generator_inputs(self.generator, batch_size, labels, seed)

    def _unpack(self, data):
        images, labels = (data, None) if not isinstance(data, tuple) else data[:2]
        if self.num_classes and labels is None:
            raise ValueError(
                "A conditional SAGAN (num_classes set) trains on (images, "
                "labels); received images only."
            )
        return images, labels if self.num_classes else None

    def _discriminate(self, images, labels):
        if self.num_classes:
            return self.discriminator([images, labels], training=True)
        return self.discriminator(images, training=True)

    def train_step(self, *args):
        # Keras' JAX trainer passes the whole model's state and takes it back
        # updated; TensorFlow and PyTorch pass the batch alone.
        if keras.backend.backend() == "jax":
            return self._jax_step(*args)
        (data,) = args
        if keras.backend.backend() == "torch":
            return self._gan_step(data, self._torch_update)
        return self._gan_step(data, self._tensorflow_update)

    def _gan_step(self, data, update):
        """One discriminator step, then one generator step, on any backend:
        `update(network, optimizer, loss_fn)` runs `loss_fn() -> (scaled
        loss, outputs)`, applies the gradient of the scaled loss with
        respect to `network`'s trainable variables with `optimizer`, and
        returns the outputs."""
        real, labels = self._unpack(data)
        real = ops.cast(real, "float32")
        batch_size = ops.shape(real)[0]
        # Under a tf.distribute strategy each replica trains on its share of
        # the global batch, and the optimizers sum the replicas' gradients:
        # dividing each replica's mean loss by their number makes the sum the
        # gradient of the mean over the global batch.
        replicas, replica_id = self._replica()

        # Discriminator: real and generated images in one pass.
        generator_inputs = self._training_inputs(
            batch_size, labels, replicas, replica_id
        )

        def discriminator_loss():
            fake = self.generator(generator_inputs, training=True)
            both = ops.concatenate([real, ops.cast(fake, real.dtype)], axis=0)
            both_labels = None
            if labels is not None:
                both_labels = ops.concatenate([labels, labels], axis=0)
            logits = ops.cast(self._discriminate(both, both_labels), "float32")
            real_logits, fake_logits = logits[:batch_size], logits[batch_size:]
            d_loss = ops.mean(ops.relu(1.0 - real_logits)) + ops.mean(
                ops.relu(1.0 + fake_logits)
            )
            scaled = self.discriminator_optimizer.scale_loss(d_loss / replicas)
            return scaled, (d_loss, real_logits, fake_logits)

        d_loss, real_logits, fake_logits = update(
            self.discriminator, self.discriminator_optimizer, discriminator_loss
        )

        # Generator.
        generator_inputs = self._training_inputs(
            batch_size, labels, replicas, replica_id
        )

        def generator_loss():
            fake = self.generator(generator_inputs, training=True)
            logits = self._discriminate(fake, labels)
            g_loss = -ops.mean(ops.cast(logits, "float32"))
            return self.generator_optimizer.scale_loss(g_loss / replicas), g_loss

        g_loss = update(self.generator, self.generator_optimizer, generator_loss)

        if self.ema_generator is not None:
            self._update_ema()
        for name, value in (
            ("d_loss", d_loss),
            ("g_loss", g_loss),
            ("d_real", ops.mean(real_logits)),
            ("d_fake", ops.mean(fake_logits)),
        ):
            self.trackers[name].update_state(value)
        return {name: tracker.result() for name, tracker in self.trackers.items()}

    def _replica(self):
        """`(number of replicas, this replica's index)`: a tf.distribute
        strategy splits each batch over replicas; on JAX (a
        `keras.distribution` included) and PyTorch the step sees the whole
        batch."""
        if keras.backend.backend() != "tensorflow":
            return 1, 0
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        return context.num_replicas_in_sync, context.replica_id_in_sync_group

    def _tensorflow_update(self, network, optimizer, loss_fn):
        import tensorflow as tf

        with tf.GradientTape() as tape:
            scaled, outputs = loss_fn()
        variables = network.trainable_variables
        optimizer.apply(tape.gradient(scaled, variables), variables)
        return outputs

    def _torch_update(self, network, optimizer, loss_fn):
        import torch

        scaled, outputs = loss_fn()
        # The other network's gradients from the previous backward pass are
        # cleared too (the discriminator's loss reaches the generator).
        self.zero_grad()
        scaled.backward()
        variables = network.trainable_variables
        with torch.no_grad():
            optimizer.apply([v.value.grad for v in variables], variables)
        return keras.tree.map_structure(lambda t: t.detach(), outputs)

    def _jax_step(self, state, data):
        """The stateless step of Keras' JAX trainer: `state` holds the
        values of the model's trainable and non-trainable variables (both
        networks, the weight average, the seed), of both optimizers (the
        model's `optimizer` is their `OptimizerGroup`) and of the trackers.
        The step runs as on the other backends inside a stateless scope over
        all of them: the latent draws, the weight average and the trackers
        assign their variables there, and the new state is read back from
        it."""
        groups = (
            self.trainable_variables,
            self.non_trainable_variables,
            self.optimizer.variables,
            self.metrics_variables,
        )
        variables = [v for group in groups for v in group]
        values = [x for group in state for x in group]
        with keras.StatelessScope(
            state_mapping=list(zip(variables, values, strict=True))
        ) as scope:
            logs = self._gan_step(
                data,
                lambda network, optimizer, loss_fn: self._jax_update(
                    scope, variables, network, optimizer, loss_fn
                ),
            )
        new_state = tuple(
            [scope.get_current_value(v) for v in group] for group in groups
        )
        return logs, new_state

    def _jax_update(self, scope, variables, network, optimizer, loss_fn):
        """`update` of `_gan_step` inside the JAX step's `scope` (over
        `variables`, the whole state): the loss is differentiated with
        respect to a zero offset of each of `network`'s trainable variables,
        what the forward passes assign (batch-norm statistics, the spectral
        norm's vectors and normalized kernels) goes back to `scope`, and
        `optimizer.stateless_apply` updates the network and the optimizer
        there."""
        import jax

        trainable = network.trainable_variables
        current = [scope.get_current_value(v) for v in variables]

        def loss_of(deltas):
            with keras_internals.StraightThroughScope(
                list(zip(variables, current, strict=True)),
                list(zip(trainable, deltas, strict=True)),
            ) as forward:
                scaled, outputs = loss_fn()
            return scaled, (outputs, [forward.get_current_value(v) for v in variables])

        zeros = [ops.zeros(v.shape, v.dtype) for v in trainable]
        (_, (outputs, assigned)), grads = jax.value_and_grad(loss_of, has_aux=True)(
            zeros
        )
        for variable, value in zip(variables, assigned, strict=True):
            variable.assign(value)
        new_trainable, new_optimizer = optimizer.stateless_apply(
            [scope.get_current_value(v) for v in optimizer.variables],
            grads,
            [scope.get_current_value(v) for v in trainable],
        )
        for variable, value in zip(trainable, new_trainable, strict=True):
            variable.assign(value)
        for variable, value in zip(optimizer.variables, new_optimizer, strict=True):
            variable.assign(value)
        return outputs

    def _training_inputs(self, batch_size, labels, replicas, replica_id):
        """Generator inputs for this replica's share of the batch: `z` is
        drawn for the global batch and each replica takes its own rows, so
        that replicas never share latent vectors and a step sees the same
        vectors on any number of replicas."""
        z = keras.random.normal(
            (replicas, batch_size, self.latent_dim), seed=self.seed_generator
        )
        z = ops.take(z, replica_id, axis=0)
        return z if labels is None else [z, ops.cast(labels, "int32")]

    def _update_ema(self):
        decay = self.ema_decay
        for average, weight in zip(
            self.ema_generator.weights, self.generator.weights, strict=True
        ):
            if weight.trainable:
                average.assign(decay * average + (1.0 - decay) * weight)
            else:
                # Batch-norm statistics and power-iteration vectors are copied.
                average.assign(weight)

    @property
    def sampler(self):
        """The network `sample` uses: the weight average when there is one."""
        return self.ema_generator or self.generator

    def sample(self, num_images, labels=None, seed=None, batch_size=256):
        """`sample_images` from `sampler` (the weight average when there is
        one): float32 numpy `(num_images, size, size, channels)` in [0, 1]."""
        return sample_images(self.sampler, num_images, labels, seed, batch_size)

    def get_compile_config(self):
        # The optimizers are rebuilt by `compile()`; a loaded model is
        # compiled again before it trains.
        return None

    def get_config(self):
        return {**super().get_config(), "image_shape": list(self.image_shape)}
