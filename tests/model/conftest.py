"""One shared tiny real fit for the model tests."""

import pytest

from model_helpers import synthetic_data


@pytest.fixture(scope="session")
def tiny_fit(tmp_path_factory):
    """A really tiny real fit (PyMC NUTS, tens of draws), saved to a NetCDF file."""
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.store import save_posterior

    data, truth = synthetic_data(n_obs=30)
    model = LatencyModel(sampler_config={"draws": 40, "tune": 40, "chains": 1, "seed": 3})
    model.build_model(data)
    model.sample_prior_predictive(20)
    with pytest.warns(Warning):  # tens of draws cannot pass the ESS threshold
        model.fit(method="pymc", progressbar=False)
    path = tmp_path_factory.mktemp("fit") / "posterior.nc"
    save_posterior(model, path)
    return model, path, truth
