"""Physics-normalized features: deployments, step (beta) and request (alpha) features."""

from bayesblis.features.alpha import (ALPHA_FEATURES, QUEUE_FEATURES, alpha_features,
                                      queue_wait_features)
from bayesblis.features.beta import (AGGREGATES, BETA_FEATURES, BLIS_BETA_ORDER, FeatureMap,
                                     beta_feature_matrix, beta_features, feature_weights,
                                     roofline_s, to_blis_beta)
from bayesblis.features.physics import Deployment, DeploymentError

__all__ = [
    "AGGREGATES", "ALPHA_FEATURES", "BETA_FEATURES", "BLIS_BETA_ORDER", "QUEUE_FEATURES",
    "Deployment", "DeploymentError", "FeatureMap", "alpha_features", "beta_feature_matrix",
    "beta_features", "feature_weights", "queue_wait_features", "roofline_s", "to_blis_beta",
]
