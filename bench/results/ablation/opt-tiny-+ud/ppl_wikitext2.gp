set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-+ud/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.2194605085567 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 1273.7854148209917
20 1277.7387412449348
30 1280.2324223240464
40 1283.0649455711514
e
