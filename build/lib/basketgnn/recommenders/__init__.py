"""Recommenders behind one interface (:class:`basketgnn.recommenders.base.Recommender`)."""
