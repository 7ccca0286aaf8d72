set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/quality/TinyStories-656K-indomain/ppl_text.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (text)'
set title 'TinyStories-656K'
plot 30.528541760761556 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 36.146440641208585
20 51.330151786184146
30 85.03592830709998
40 142.07274555394878
e
10 38.31056567014843
20 52.70169153668449
30 91.09650278554695
40 172.53220090192352
e
10 37.090119947461154
20 49.59308753109434
30 84.60606333087286
40 148.0647932236322
e
10 36.84910005072307
20 48.80883539392444
30 81.18260766178469
40 147.31103753528296
e
10 34.57586632388009
20 45.205902313666066
30 72.99786835203533
40 117.3730544175882
e
10 34.439420931789904
20 44.992026532244815
30 71.23535591464857
40 113.64055321760418
e
10 38.617916232729534
20 55.401899156894295
30 95.86538334550154
40 169.42669004708853
e
