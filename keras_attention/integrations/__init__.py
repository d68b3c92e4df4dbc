"""Our attention in other libraries' models: `integrations.keras_hub` puts it
into keras-hub's backbones and tasks (`swap_attention`). Each integration
imports its library itself, so the package needs it only when it is used."""
